//! Real NGINX and Caddy processes in front of a test upstream, started from the recipes in
//! `examples/` with their addresses moved to free loopback ports, each in a directory of its
//! own (pid, logs, temp files, Caddy's data), killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A proxy process, killed on drop.
pub struct Proxy {
    /// Where it listens.
    pub port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proxy {
    /// `http://127.0.0.1:PORT{path}`
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Its error log, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

/// Whether `binary` is installed; outside CI a missing one skips the test with a loud message,
/// in CI (`CI` set) it fails it (`scripts/test.sh` installs both).
pub fn installed(binary: &str) -> bool {
    let found = Command::new(binary)
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{binary} is not installed (scripts/test.sh installs it)"
        );
        eprintln!("SKIPPED: {binary} is not installed; scripts/test.sh installs it with apt-get");
    }
    found
}

/// The repository's `examples/` file `name`.
pub fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// slidegate's two listeners a proxy recipe talks to: its proxy listener and forward auth.
pub struct Slidegate<'a> {
    pub proxy: &'a str,
    pub forward_auth: &'a str,
}

/// The recipe `name` with its addresses moved: the app's (`127.0.0.1:9000`) to `app`,
/// slidegate's proxy listener (`127.0.0.1:8080`) and forward auth (`127.0.0.1:8082`) to
/// `slidegate`'s, and its own listener as `listen` says.
fn moved(name: &str, app: &str, slidegate: &Slidegate<'_>, listen: (&str, String)) -> String {
    example(name)
        .replace("127.0.0.1:9000", app)
        .replace("127.0.0.1:8080", slidegate.proxy)
        .replace("127.0.0.1:8082", slidegate.forward_auth)
        .replace(listen.0, &listen.1)
}

/// NGINX running `examples/nginx/slidegate.conf` (its `server` block and upstreams) with the
/// app at `app` and slidegate's listeners at `slidegate`; `edit` changes the recipe's text
/// first (a setting a test adds).
pub fn nginx(app: &str, slidegate: &Slidegate<'_>, edit: fn(String) -> String) -> Proxy {
    let dir = tempfile::tempdir().unwrap();
    let port = super::free_port();
    let listen = (
        "listen 127.0.0.1:8000;",
        format!("listen 127.0.0.1:{port};"),
    );
    let recipe = edit(moved("nginx/slidegate.conf", app, slidegate, listen));
    std::fs::write(dir.path().join("slidegate.conf"), recipe).unwrap();
    let d = dir.path().display();
    let main = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\nevents {{ worker_connections 64; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  include {d}/slidegate.conf;\n}}\n"
    );
    std::fs::write(dir.path().join("nginx.conf"), main).unwrap();
    let child = Command::new("nginx")
        .args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx starts");
    ready(Proxy { port, child, dir })
}

/// Caddy running `examples/caddy/Caddyfile` with the app at `app` and slidegate's listeners
/// at `slidegate` (its admin endpoint off, its state in the proxy's directory).
pub fn caddy(app: &str, slidegate: &Slidegate<'_>, _edit: fn(String) -> String) -> Proxy {
    let dir = tempfile::tempdir().unwrap();
    let port = super::free_port();
    let listen = (":8000 {", format!("http://127.0.0.1:{port} {{"));
    let recipe = moved("caddy/Caddyfile", app, slidegate, listen);
    let global = "{\n\tadmin off\n\tauto_https off\n}\n\n";
    let file: PathBuf = dir.path().join("Caddyfile");
    std::fs::write(&file, format!("{global}{recipe}")).unwrap();
    let log = std::fs::File::create(dir.path().join("error.log")).unwrap();
    let child = Command::new("caddy")
        .args(["run", "--adapter", "caddyfile", "--config"])
        .arg(&file)
        .env("HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("caddy starts");
    ready(Proxy { port, child, dir })
}

/// Waits (10 s at most) until the proxy accepts connections.
fn ready(mut proxy: Proxy) -> Proxy {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", proxy.port)).is_ok() {
            return proxy;
        }
        if let Ok(Some(status)) = proxy.child.try_wait() {
            panic!("the proxy exited ({status}):\n{}", proxy.log());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the proxy did not listen within 10 s:\n{}", proxy.log());
}

/// The secret the proxy recipes' `hash = true` key parts are keyed with in these tests.
pub const KEY_SECRET: &str = "recipe-test-secret";

/// slidegate from `examples/<recipe>/slidegate.toml` as written, but for its listeners (port 0;
/// two listeners on one address stay on one), its store (`redis`, a key prefix of its own) and
/// its app (`app`, when the recipe proxies to one), with the recipe's `ratelimit/` files beside
/// it and [`KEY_SECRET`] as its hash secret.
pub async fn recipe_gateway(
    recipe: &str,
    redis: &super::redis::RedisServer,
    app: Option<&str>,
) -> super::gateway::Gateway {
    let mut toml = example(&format!("{recipe}/slidegate.toml"));
    for port in ["8080", "9091", "8081", "8082", "8083"] {
        toml = toml.replace(
            &format!("listen = \"127.0.0.1:{port}\""),
            "listen = \"127.0.0.1:0\"",
        );
    }
    let store = format!(
        "url = \"{}\"\nkey_prefix = \"{}\"",
        redis.url(),
        super::unique_prefix(recipe)
    );
    assert!(
        toml.contains("url = \"redis://127.0.0.1:6390\""),
        "a private Redis"
    );
    toml = toml.replace("url = \"redis://127.0.0.1:6390\"", &store);
    if let Some(app) = app {
        toml = toml.replace("http://127.0.0.1:9000", &format!("http://{app}"));
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(recipe)
        .join("ratelimit");
    let mut files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries {
            let path = e.unwrap().path();
            let name = format!("ratelimit/{}", path.file_name().unwrap().to_string_lossy());
            files.push((name, std::fs::read(&path).unwrap()));
        }
    }
    let files: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    super::gateway::start_with_env(&toml, &files, &[("SLIDEGATE_KEY_SECRET", KEY_SECRET)]).await
}
