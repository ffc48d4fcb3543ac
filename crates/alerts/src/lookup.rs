//! [`Lookup`]: what a rule needs to know of numbers and addresses beyond the record — the
//! E.164 form of a dialled number, its country and whether it is premium, and the country of
//! an address. The engine asks through this trait so that its tables can be swapped (the
//! embedded ones, an operator's MaxMind database) and tests can name their own.

use std::net::IpAddr;

pub trait Lookup: Send + Sync {
    /// `+CC...` for a number dialled internationally (`+`, `00`, `011`); `None` for a
    /// national or unreadable one (never a guess).
    fn normalize_number(&self, dialled: &str) -> Option<String>;
    /// The ISO 3166 alpha-2 code of an E.164 number's country, or a pseudo-country for the
    /// global services (satellite, international networks).
    fn number_country(&self, e164: &str) -> Option<String>;
    /// A premium or high-risk range (built in, plus `extra`: `[alerts] premium_prefixes`).
    fn is_premium(&self, e164: &str, extra: &[String]) -> bool;
    /// The ISO 3166 alpha-2 code of a public address's country; `None` for private,
    /// loopback, documentation and unknown ones.
    fn ip_country(&self, ip: IpAddr) -> Option<String>;
}

/// The global services that fraud favours: satellite (+881 GMSS, +870 Inmarsat),
/// International Networks (+882, +883) and international premium rate (+979).
pub const PREMIUM_BUILTIN: [&str; 5] = ["+881", "+882", "+883", "+870", "+979"];

/// Numbers read as dialled (`+`, `00`, `011`), the built-in premium list, and no countries.
#[derive(Debug, Clone, Copy, Default)]
pub struct Basic;

impl Lookup for Basic {
    fn normalize_number(&self, dialled: &str) -> Option<String> {
        basic_normalize(dialled)
    }

    fn number_country(&self, _e164: &str) -> Option<String> {
        None
    }

    fn is_premium(&self, e164: &str, extra: &[String]) -> bool {
        PREMIUM_BUILTIN.iter().any(|p| e164.starts_with(p))
            || extra.iter().any(|p| e164.starts_with(p.as_str()))
    }

    fn ip_country(&self, _ip: IpAddr) -> Option<String> {
        None
    }
}

/// `+`, `00` and `011` followed by 7 to 15 digits (separators dropped).
pub fn basic_normalize(dialled: &str) -> Option<String> {
    let user = dialled
        .strip_prefix("tel:")
        .or_else(|| dialled.strip_prefix("sip:"))
        .unwrap_or(dialled);
    let user = user.split(['@', ';']).next()?;
    if user.len() > 64 {
        return None;
    }
    let cleaned: String = user
        .chars()
        .filter(|c| !matches!(c, '-' | '.' | ' ' | '(' | ')'))
        .collect();
    let digits = cleaned
        .strip_prefix('+')
        .or_else(|| cleaned.strip_prefix("011"))
        .or_else(|| cleaned.strip_prefix("00"))?;
    ((7..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| format!("+{digits}"))
}

/// The tables Tandem ships, as `[alerts]` configures them: numbers read with the PBX's
/// international prefixes (`e164`), the ITU country codes, the built-in premium list and
/// `premium_prefixes`, and countries of addresses from the embedded table or `geoip_mmdb`
/// (`geo`).
#[derive(Debug)]
pub struct Tables {
    dialling: crate::e164::Dialling,
    premium: crate::e164::PremiumList,
    countries: crate::geo::Countries,
}

impl Tables {
    /// Reads `cfg`'s tables; a GeoIP database is loaded here (an error names the file).
    pub fn from_config(cfg: &crate::AlertsConfig) -> Result<Tables, crate::RuleError> {
        let alerts = |key: &str, problem: String| crate::RuleError::Alerts {
            key: key.into(),
            problem,
        };
        let dialling = match &cfg.international_prefixes {
            Some(p) => crate::e164::Dialling::new(p)
                .map_err(|e| alerts("international_prefixes", e.to_string()))?,
            None => crate::e164::Dialling::default(),
        };
        let premium = crate::e164::PremiumList::builtin()
            .with(&cfg.premium_prefixes)
            .map_err(|e| alerts("premium_prefixes", e.to_string()))?;
        let countries = crate::geo::Countries::from_config(cfg.geoip_mmdb.as_deref())
            .map_err(|e| alerts("geoip_mmdb", e.to_string()))?;
        Ok(Tables {
            dialling,
            premium,
            countries,
        })
    }

    /// Where addresses' countries come from, for the log.
    pub fn describe(&self) -> String {
        self.countries.describe()
    }
}

impl Lookup for Tables {
    fn normalize_number(&self, dialled: &str) -> Option<String> {
        crate::e164::normalize(dialled, &self.dialling)
    }

    fn number_country(&self, e164: &str) -> Option<String> {
        crate::e164::country(e164).map(|c| c.iso.to_string())
    }

    /// `premium_prefixes` are in the list already.
    fn is_premium(&self, e164: &str, _extra: &[String]) -> bool {
        self.premium.matches(e164)
    }

    fn ip_country(&self, ip: IpAddr) -> Option<String> {
        self.countries.lookup(ip).map(|c| c.as_str().to_string())
    }
}
