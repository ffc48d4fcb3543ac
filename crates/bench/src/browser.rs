//! A real browser for the console's tests and `tandem bench console`: Debian's headless
//! Chromium driven through chromedriver (WebDriver), and a running `tandem serve` with a seeded
//! metrics history and a user.

use anyhow::Context;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// chromedriver and chromium, where Debian's packages put them.
pub fn tools() -> Option<(PathBuf, PathBuf)> {
    let find = |names: &[&str]| {
        names.iter().find_map(|n| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(n))
                    .find(|p| p.is_file())
            })
        })
    };
    Some((
        find(&["chromedriver"])?,
        find(&["chromium", "chromium-browser"])?,
    ))
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_listening(addr: SocketAddr, what: &str, child: &mut Child) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).is_err() {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("{what} exited before listening on {addr}: {status}");
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{what} did not listen on {addr} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    Ok(())
}

/// Headless Chromium under chromedriver; both end when this is dropped.
pub struct Browser {
    driver: Child,
    pub client: fantoccini::Client,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a window of `width`×`height`, in the
    /// machine's time zone.
    pub async fn launch(width: u32, height: u32) -> anyhow::Result<Browser> {
        Browser::launch_in_zone(width, height, None).await
    }

    /// As [`Browser::launch`], with the browser in time zone `tz` (an IANA name such as
    /// `Asia/Kolkata`) when given, as a person elsewhere in the world sees the pages.
    pub async fn launch_in_zone(
        width: u32,
        height: u32,
        tz: Option<&str>,
    ) -> anyhow::Result<Browser> {
        let (driver_path, chromium) = tools().context(
            "chromedriver and chromium are needed (Debian: apt-get install chromium chromium-driver)",
        )?;
        let port = free_port()?;
        let mut driver = Command::new(&driver_path);
        if let Some(tz) = tz {
            // Chromium takes its zone from TZ, which it inherits from chromedriver.
            driver.env("TZ", tz);
        }
        let mut driver = driver
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", driver_path.display()))?;
        wait_listening(
            SocketAddr::from(([127, 0, 0, 1], port)),
            "chromedriver",
            &mut driver,
        )?;
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--hide-scrollbars", "--force-device-scale-factor=1",
                    // The call page's players are started by the tests, without a gesture.
                    "--autoplay-policy=no-user-gesture-required",
                    // This machine's network is closed: no background connections.
                    "--disable-background-networking", "--disable-component-update",
                    format!("--window-size={width},{height}"),
                ],
            }),
        );
        let client = fantoccini::ClientBuilder::new(
            hyper_util::client::legacy::connect::HttpConnector::new(),
        )
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .context("opening a Chromium session through chromedriver")?;
        Ok(Browser { driver, client })
    }

    /// Ends the browser session and chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }

    /// Signs in through the login form; returns the page's URL afterwards.
    pub async fn login(&self, base: &str, user: &str, password: &str) -> anyhow::Result<String> {
        use fantoccini::Locator;
        let c = &self.client;
        c.goto(&format!("{base}login")).await?;
        c.find(Locator::Id("user")).await?.send_keys(user).await?;
        c.find(Locator::Id("password"))
            .await?
            .send_keys(password)
            .await?;
        c.find(Locator::Css("#login button[type=submit]"))
            .await?
            .click()
            .await?;
        // The form's answer is a new page: the login again (with an error) or the target.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let url = c.current_url().await?;
            let error_shown = !c.find_all(Locator::Id("login-error")).await?.is_empty();
            if url.path() != "/login" || error_shown || Instant::now() > deadline {
                return Ok(url.to_string());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The text of the element `at` finds on the current page.
    pub async fn text(&self, at: fantoccini::Locator<'_>) -> anyhow::Result<String> {
        Ok(self.client.find(at).await?.text().await?)
    }

    /// Clicks the element `at` finds on the current page.
    pub async fn click(&self, at: fantoccini::Locator<'_>) -> anyhow::Result<()> {
        Ok(self.client.find(at).await?.click().await?)
    }

    /// Starts the audio player `selector` finds (muted) and returns its duration in seconds
    /// once it plays; an error says why the browser would not.
    pub async fn play_audio(&self, selector: &str) -> anyhow::Result<f64> {
        let script = format!(
            "const done = arguments[arguments.length - 1];
             const a = document.querySelector({selector:?});
             if (!a) {{ done({{error: 'no such player'}}); return; }}
             a.muted = true;
             const fail = (e) => done({{error: String(e && (e.message || e.type) || e), code: a.error && a.error.code}});
             a.addEventListener('error', fail, {{once: true}});
             a.addEventListener('timeupdate', () => {{ if (a.currentTime > 0) done({{duration: a.duration, at: a.currentTime}}); }});
             a.play().catch(fail);"
        );
        let v = self.client.execute_async(&script, vec![]).await?;
        if !v["error"].is_null() {
            anyhow::bail!("{selector} did not play: {v}");
        }
        v["duration"].as_f64().context("no duration")
    }

    /// The bytes at `url_expr` (a JavaScript expression for a URL), fetched by the page itself
    /// with its session.
    pub async fn fetch_bytes(&self, url_expr: &str) -> anyhow::Result<Vec<u8>> {
        let script = format!(
            "const done = arguments[arguments.length - 1];
             fetch({url_expr}, {{credentials: 'same-origin'}})
               .then(r => r.ok ? r.arrayBuffer() : Promise.reject(r.status))
               .then(buf => done(Array.from(new Uint8Array(buf))))
               .catch(e => done({{error: String(e)}}));"
        );
        let v = self.client.execute_async(&script, vec![]).await?;
        if v.get("error").is_some() {
            anyhow::bail!("download failed: {v}");
        }
        Ok(v.as_array()
            .context("not bytes")?
            .iter()
            .map(|x| x.as_u64().unwrap_or(0) as u8)
            .collect())
    }

    /// Navigation Timing of the current page: (responseEnd, loadEventEnd) in ms from its start.
    pub async fn load_timing_ms(&self) -> anyhow::Result<(f64, f64)> {
        let v = self
            .client
            .execute(
                "const n = performance.getEntriesByType('navigation')[0]; \
                 return [n.responseEnd, n.loadEventEnd];",
                vec![],
            )
            .await?;
        let a = v.as_array().context("navigation timing")?;
        Ok((
            a.first().and_then(|x| x.as_f64()).unwrap_or(f64::NAN),
            a.get(1).and_then(|x| x.as_f64()).unwrap_or(f64::NAN),
        ))
    }

    /// Saves a PNG of the window.
    pub async fn screenshot(&self, path: &Path) -> anyhow::Result<()> {
        let png = self.client.screenshot().await?;
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A `tandem serve` with its console on a free port, over a data directory of its own.
pub struct ConsoleServer {
    child: Child,
    pub web: SocketAddr,
    pub data_dir: PathBuf,
}

impl ConsoleServer {
    /// Starts `tandem` (the binary at `exe`) serving over `data_dir`, with `extra` arguments.
    pub fn start(exe: &Path, data_dir: &Path, extra: &[&str]) -> anyhow::Result<ConsoleServer> {
        let web = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let mut child = Command::new(exe)
            .args(["serve", "--agi-listen", "127.0.0.1:0", "--metrics-listen"])
            .arg("127.0.0.1:0")
            .arg("--web-listen")
            .arg(web.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .env("TANDEM_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        wait_listening(web, "tandem serve", &mut child)?;
        Ok(ConsoleServer {
            child,
            web,
            data_dir: data_dir.to_owned(),
        })
    }

    pub fn base(&self) -> String {
        format!("http://{}/", self.web)
    }

    /// The server's process id (its memory figures are in `/proc/PID/status`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ConsoleServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Adds a console user with `tandem user add`.
pub fn add_user(
    exe: &Path,
    data_dir: &Path,
    name: &str,
    role: &str,
    password: &str,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut child = Command::new(exe)
        .args([
            "user",
            "add",
            name,
            "--role",
            role,
            "--password-stdin",
            "--data-dir",
        ])
        .arg(data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    writeln!(child.stdin.take().context("stdin")?, "{password}")?;
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "tandem user add: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// One HTTP/1.1 request over a fresh connection: `(status, headers, body)`.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> anyhow::Result<(u16, String, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    http_on(&mut s, &addr.to_string(), method, path, headers, body)
}

/// One HTTP/1.1 request on `stream` (plain or TLS), which the server closes after its answer:
/// `(status, headers, body)`. A form body is sent as `application/x-www-form-urlencoded`.
pub fn http_on(
    stream: &mut (impl std::io::Read + std::io::Write),
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> anyhow::Result<(u16, String, String)> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    // A TLS peer that closes without its close_notify ends the read with an error after the
    // whole answer: what arrived is the answer.
    if let Err(e) = stream.read_to_end(&mut raw)
        && raw.is_empty()
    {
        return Err(e.into());
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no status line")?;
    Ok((status, head.to_owned(), body.to_owned()))
}

/// Signs in over plain HTTP; returns the `Cookie` header value of the new session.
pub fn login_cookie(addr: SocketAddr, user: &str, password: &str) -> anyhow::Result<String> {
    let (status, head, _) = http(
        addr,
        "POST",
        "/login",
        &[],
        &format!("user={user}&password={password}&next=/dashboard"),
    )?;
    anyhow::ensure!(status == 303, "login answered {status}: {head}");
    head.lines()
        .find_map(|l| {
            l.strip_prefix("set-cookie: ")
                .map(|c| c.split(';').next().unwrap_or("").to_owned())
        })
        .context("no session cookie in the login's answer")
}
