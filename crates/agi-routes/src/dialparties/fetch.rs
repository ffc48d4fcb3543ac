//! Reading what the decision needs in few round trips: many reads in one `GET FULL VARIABLE`.
//!
//! The expression is a list of items separated by `,`, each `${URIENCODE(...)}` around a
//! variable, a `${DB(family/key)}` or a `${PJSIP_DIAL_CONTACTS(endpoint)}`, so no value can hold
//! the separator: URIENCODE leaves only letters, digits and `-_.!~*'()` unescaped.
//! `${EXTENSION_STATE(ext@ext-local)}` goes bare: its answer is one of a few upper-case words.
//! Every expression starts with `${URIENCODE(,)}`, which must come back as `%2C`: a system
//! without func_uri would otherwise hand back empty values that look like "not set".
//!
//! Names and keys go into the expression only when they are made of letters, digits and
//! `_.*+#-/` (what extensions and devices are made of). Anything else could change the
//! expression's meaning (`}`, `$`, `@`, quotes), so such a read is sent as its own command,
//! as the script sends it: `DATABASE GET`, or `GET VARIABLE` for the functions.
//!
//! Asterisk reads an AGI command into a fixed buffer: 2 KiB before 20.16, 21.11 and 22.6,
//! 8 KiB from them on (res_agi.c `AGI_BUF_LEN`). A longer line would be cut and its tail read
//! as a second command, so expressions are split to fit the peer's version.

use super::decide::Facts;
use fastagi::{AgiError, Session};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// One value the decision reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Fact {
    Var(String),
    Db(String, String),
    State(String),
    Contacts(String),
}

/// A read made in passing with the ones asked for, to save a round trip later.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Guess {
    /// `DEVICE/<device>/dial` of a member's device, nested: right when the member has one
    /// device (`AMPUSER/<member>/device` without `&`).
    DeviceDial { member: String },
    /// `AMPUSER/<FMGRP>/followme/<leaf>` nested on the follow-me group variable.
    Followme { leaf: &'static str },
}

/// The values read so far, and what the decision asked for that is not among them. Per call,
/// some hundreds of entries, looked up a few thousand times: a fast hash, since the keys are
/// the call's own (member numbers from its dialplan, values from its Asterisk).
#[derive(Debug, Default)]
pub struct Cache {
    known: HashMap<Fact, String>,
    missing: Vec<Fact>,
    missing_set: HashSet<Fact>,
}

impl Cache {
    fn get(&mut self, fact: Fact) -> String {
        if let Some(v) = self.known.get(&fact) {
            return v.clone();
        }
        if self.missing_set.insert(fact.clone()) {
            self.missing.push(fact);
        }
        String::new()
    }

    /// What the last decision asked for and did not find, in the order it asked.
    pub fn take_missing(&mut self) -> Vec<Fact> {
        self.missing_set.clear();
        std::mem::take(&mut self.missing)
    }

    pub fn insert(&mut self, fact: Fact, value: String) {
        self.known.insert(fact, value);
    }

    pub fn knows(&self, fact: &Fact) -> bool {
        self.known.contains_key(fact)
    }

    pub fn len(&self) -> usize {
        self.known.len()
    }

    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }
}

impl Facts for Cache {
    fn var(&mut self, name: &str) -> String {
        self.get(Fact::Var(name.to_string()))
    }
    fn db(&mut self, family: &str, key: &str) -> String {
        self.get(Fact::Db(family.to_string(), key.to_string()))
    }
    fn state(&mut self, ext: &str) -> String {
        self.get(Fact::State(ext.to_string()))
    }
    fn contacts(&mut self, endpoint: &str) -> String {
        self.get(Fact::Contacts(endpoint.to_string()))
    }
}

/// Text that may stand inside an expression without changing it.
pub fn embeddable(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_.*+#-/".contains(&b))
}

/// `family/key` may stand in `DB(...)`: the family must not hold the `/` that DB() splits at.
pub fn db_path_embeddable(family: &str, key: &str) -> bool {
    !family.is_empty() && !family.contains('/') && embeddable(family) && embeddable(key)
}

/// The longest command line the peer reads whole, from its `agi_version`.
pub fn line_bytes_max(agi_version: &str) -> usize {
    const SMALL: usize = 2048;
    const LARGE: usize = 8192;
    let mut parts = agi_version.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next()) else {
        return SMALL;
    };
    let large = match major {
        20 => minor >= 16,
        21 => minor >= 11,
        22 => minor >= 6,
        m => m >= 23,
    };
    if large { LARGE } else { SMALL }
}

const SENTINEL: &str = "${URIENCODE(,)}";
const SENTINEL_ANSWER: &str = "%2C";
const COMMAND: &str = "GET FULL VARIABLE ";

enum Item {
    Fact(Fact),
    Guess(Guess),
}

fn expression_of(item: &Item) -> String {
    match item {
        Item::Fact(Fact::Var(n)) => format!("${{URIENCODE(${{{n}}})}}"),
        Item::Fact(Fact::Db(f, k)) => format!("${{URIENCODE(${{DB({f}/{k})}})}}"),
        Item::Fact(Fact::State(e)) => format!("${{EXTENSION_STATE({e}@ext-local)}}"),
        Item::Fact(Fact::Contacts(e)) => format!("${{URIENCODE(${{PJSIP_DIAL_CONTACTS({e})}})}}"),
        Item::Guess(Guess::DeviceDial { member }) => {
            format!("${{URIENCODE(${{DB(DEVICE/${{DB(AMPUSER/{member}/device)}}/dial)}})}}")
        }
        Item::Guess(Guess::Followme { leaf }) => {
            format!("${{URIENCODE(${{DB(AMPUSER/${{FMGRP}}/followme/{leaf})}})}}")
        }
    }
}

fn fits(fact: &Fact) -> bool {
    match fact {
        Fact::Var(n) => embeddable(n),
        Fact::Db(f, k) => db_path_embeddable(f, k),
        Fact::State(e) | Fact::Contacts(e) => embeddable(e) && !e.is_empty(),
    }
}

/// Reads `facts` (and the guesses that go with them) into `cache`. Returns the round trips
/// it took.
pub async fn fetch(
    s: &mut Session,
    cache: &mut Cache,
    facts: Vec<Fact>,
    guesses: Vec<Guess>,
    line_bytes_max: usize,
) -> Result<u32, AgiError> {
    let mut trips = 0;
    let mut batch: Vec<Item> = Vec::new();
    let mut expr = String::from(SENTINEL);
    // The command, a possible pair of quotes and the newline.
    let budget = line_bytes_max.saturating_sub(COMMAND.len() + 3);
    let mut asked = HashSet::default();
    let items: Vec<Item> = facts
        .into_iter()
        .filter(|f| !cache.knows(f) && asked.insert(f.clone()))
        .map(Item::Fact)
        .chain(guesses.into_iter().map(Item::Guess))
        .collect();
    for item in items {
        if let Item::Fact(f) = &item
            && !fits(f)
        {
            let v = read_alone(s, f).await?;
            trips += 1;
            cache.insert(f.clone(), v);
            continue;
        }
        let text = expression_of(&item);
        if expr.len() + 1 + text.len() > budget && !batch.is_empty() {
            trips += send(s, cache, &mut batch, &mut expr).await?;
        }
        expr.push(',');
        expr.push_str(&text);
        batch.push(item);
    }
    if !batch.is_empty() {
        trips += send(s, cache, &mut batch, &mut expr).await?;
    }
    Ok(trips)
}

async fn send(
    s: &mut Session,
    cache: &mut Cache,
    batch: &mut Vec<Item>,
    expr: &mut String,
) -> Result<u32, AgiError> {
    let answer = s.get_full_variable(expr).await?.unwrap_or_default();
    let mut fields = answer.split(',');
    if fields.next() != Some(SENTINEL_ANSWER) {
        return Err(AgiError::Handler(
            "dialparties: Asterisk does not URI-encode (${URIENCODE(,)} did not give %2C); load func_uri.so"
                .into(),
        ));
    }
    let fields: Vec<&str> = fields.collect();
    if fields.len() != batch.len() {
        return Err(AgiError::Handler(
            format!(
                "dialparties: GET FULL VARIABLE answered {} values for {} reads",
                fields.len(),
                batch.len()
            )
            .into(),
        ));
    }
    // Facts first: the guesses read what they were nested on.
    let mut guesses = Vec::new();
    for (item, field) in batch.drain(..).zip(fields) {
        match item {
            Item::Fact(f @ Fact::State(_)) => cache.insert(f, field.to_string()),
            Item::Fact(f) => cache.insert(f, agi::percent_decode(field)),
            Item::Guess(g) => guesses.push((g, agi::percent_decode(field))),
        }
    }
    for (g, value) in guesses {
        settle_guess(cache, g, value);
    }
    *expr = String::from(SENTINEL);
    Ok(1)
}

/// A guess stands for the fact it nested on when the inner value was one that a plain read
/// would have used the same way.
fn settle_guess(cache: &mut Cache, guess: Guess, value: String) {
    let (inner, fact) = match guess {
        Guess::DeviceDial { member } => {
            let device = Fact::Db("AMPUSER".into(), format!("{member}/device"));
            let Some(d) = cache.known.get(&device).cloned() else {
                return;
            };
            if d.contains('&') {
                return;
            }
            (d.clone(), Fact::Db("DEVICE".into(), format!("{d}/dial")))
        }
        Guess::Followme { leaf } => {
            let Some(g) = cache.known.get(&Fact::Var("FMGRP".into())).cloned() else {
                return;
            };
            (
                g.clone(),
                Fact::Db("AMPUSER".into(), format!("{g}/followme/{leaf}")),
            )
        }
    };
    // DB() strips quotes and backslashes from its argument; DATABASE GET does not.
    if embeddable(&inner) && !cache.knows(&fact) {
        cache.insert(fact, value);
    }
}

/// One read as its own command.
async fn read_alone(s: &mut Session, fact: &Fact) -> Result<String, AgiError> {
    let v = match fact {
        Fact::Var(n) => s.get_variable(n).await?,
        Fact::Db(f, k) => s.database_get(f, k).await?,
        Fact::State(e) => {
            s.get_variable(&format!("EXTENSION_STATE({e}@ext-local)"))
                .await?
        }
        Fact::Contacts(e) => s.get_variable(&format!("PJSIP_DIAL_CONTACTS({e})")).await?,
    };
    Ok(v.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_limit_follows_the_version() {
        assert_eq!(line_bytes_max("22.10.1"), 8192);
        assert_eq!(line_bytes_max("22.5.2"), 2048);
        assert_eq!(line_bytes_max("20.16.0"), 8192);
        assert_eq!(line_bytes_max("21.10.0"), 2048);
        assert_eq!(line_bytes_max("23.0.0-rc1"), 8192);
        assert_eq!(line_bytes_max("18.26.0"), 2048);
        assert_eq!(line_bytes_max("GIT-master-abc"), 2048);
        assert_eq!(line_bytes_max(""), 2048);
    }

    #[test]
    fn only_plain_names_go_into_an_expression() {
        assert!(embeddable("1001"));
        assert!(embeddable("7135689715#"));
        assert!(embeddable("/dial"));
        assert!(!embeddable("a}b"));
        assert!(!embeddable("${SHELL(id)}"));
        assert!(!embeddable("100@other"));
        assert!(!embeddable("a b"));
    }
}
