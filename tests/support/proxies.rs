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

/// The recipe `name` with its addresses moved: the app's (`127.0.0.1:9000`) to `app`, forward
/// auth's (`127.0.0.1:8082`) to `slidegate`, and its own listener as `listen` says.
fn moved(name: &str, app: &str, slidegate: &str, listen: (&str, String)) -> String {
    example(name)
        .replace("127.0.0.1:9000", app)
        .replace("127.0.0.1:8082", slidegate)
        .replace(listen.0, &listen.1)
}

/// NGINX running `examples/nginx/slidegate.conf` (its `server` block and upstreams) with the
/// app at `app` and slidegate's forward auth at `slidegate`.
pub fn nginx(app: &str, slidegate: &str) -> Proxy {
    let dir = tempfile::tempdir().unwrap();
    let port = super::free_port();
    let listen = (
        "listen 127.0.0.1:8000;",
        format!("listen 127.0.0.1:{port};"),
    );
    let recipe = moved("nginx/slidegate.conf", app, slidegate, listen);
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

/// Caddy running `examples/caddy/Caddyfile` with the app at `app` and slidegate's forward
/// auth at `slidegate` (its admin endpoint off, its state in the proxy's directory).
pub fn caddy(app: &str, slidegate: &str) -> Proxy {
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
