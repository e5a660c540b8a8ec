//! The login recipe in front of the demo upstream (the binary the quick start runs): the demo
//! answers `/api/login` with 401 for a wrong password (200 for `right`), so the recipe's
//! failures show as they would in front of a real login service: five wrong passwords, then
//! the sixth attempt is refused and the account blocked, while a right password forgives.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use http::Method;
use support::http::HttpClient;
use support::recipes::Recipe;
use support::redis::RedisServer;

/// The demo upstream on a free port, killed on drop.
struct Demo(Child, u16);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn demo() -> Demo {
    let port = support::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_demo-upstream"))
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the demo-upstream binary");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "demo-upstream did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Demo(child, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_upstream_fails_wrong_passwords_on_the_recipes_path() {
    let up = demo();
    let client = HttpClient::default();
    let json = [("content-type", "application/json")];
    let direct = |body: &'static str| {
        let (client, url) = (
            client.clone(),
            format!("http://127.0.0.1:{}/api/login", up.1),
        );
        async move { client.send(Method::POST, &url, &json, body).await.status }
    };
    assert_eq!(
        direct(r#"{"username":"carol","password":"wrong"}"#).await,
        401
    );
    assert_eq!(
        direct(r#"{"username":"carol","password":"right"}"#).await,
        200
    );
    assert_eq!(
        direct(r#"{"username":"carol"}"#).await,
        200,
        "no password: 200"
    );

    let redis = RedisServer::start();
    let gw = Recipe::start_at("login.toml", &redis, &format!("http://127.0.0.1:{}", up.1)).await;
    let login = |password: &'static str| {
        let (client, url) = (client.clone(), gw.url("/api/login"));
        let body = format!(r#"{{"username":"Carol","password":"{password}"}}"#);
        async move { client.send(Method::POST, &url, &json, &body).await.status }
    };
    assert_eq!(login("right").await, 200);
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(login("wrong").await.as_u16());
    }
    assert_eq!(
        statuses,
        [401, 401, 401, 401, 401, 429],
        "five failures, then refused"
    );
    let blocked = gw.admin_get("/admin/blocked?route=login&value=carol").await;
    assert_eq!(blocked["blocked"][0]["reason"], "block", "{blocked}");
    gw.stop().await;
}
