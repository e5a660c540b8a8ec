//! The gateway's decision call, for `redis-benchmark` (`bench/campaign`): the script text, or
//! the KEYS and ARGV of one decision of a route, exactly as the gateway sends them for one
//! request alone in its call (layout in `lua/decide.lua`), so a hand-driven benchmark runs the
//! same script on the same keys without spelling the layout out in shell.
//!
//! ```text
//! decision_call script                                  the script, on stdout
//! decision_call library                                 the Functions library, on stdout
//! decision_call function                                the library's function name
//! decision_call args CONFIG ROUTE PREFIX KEY TOKEN      numkeys, KEYS, ARGV: one per line
//! ```
//!
//! `args` takes the route's own limit values (no segment or plan), `PREFIX` in place of
//! `store.key_prefix`, the derived key `KEY` and the call's `TOKEN` (what makes members unique;
//! both may hold `__rand_int__` for redis-benchmark; an empty token would make it a dry run),
//! and decides at the Redis clock with cost 1.
//! Only routes whose limits count one key (the route's own) are supported.

use std::path::Path;
use std::process::ExitCode;

use slidegate::config::Config;
use slidegate::store::layout;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["script"] => {
            print!("{}", slidegate::store::decision_script());
            ExitCode::SUCCESS
        }
        ["library"] => {
            print!("{}", slidegate::store::decision_library().code);
            ExitCode::SUCCESS
        }
        ["function"] => {
            println!("{}", slidegate::store::decision_library().function);
            ExitCode::SUCCESS
        }
        ["args", config, route, prefix, key, token] => {
            match call(config, route, prefix, key, token) {
                Ok(lines) => {
                    for line in lines {
                        println!("{line}");
                    }
                    ExitCode::SUCCESS
                }
                Err(why) => {
                    eprintln!("decision_call: {why}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {
            eprintln!(
                "usage: decision_call script | library | function | \
                 decision_call args CONFIG ROUTE PREFIX KEY TOKEN"
            );
            ExitCode::from(2)
        }
    }
}

/// numkeys, the keys, then ARGV.
fn call(
    config: &str,
    route: &str,
    prefix: &str,
    key: &str,
    token: &str,
) -> Result<Vec<String>, String> {
    if token.is_empty() {
        return Err("TOKEN must not be empty (an empty token makes the call a dry run)".into());
    }
    let config = Config::load(Path::new(config)).map_err(|e| e.to_string())?;
    let route = config
        .route(route)
        .ok_or_else(|| format!("no route `{route}`"))?;
    let set = slidegate::limit::limit_set(route);
    if set.slots != 1 {
        return Err(format!(
            "route `{}` counts {} keys; only routes with one key are supported",
            route.name, set.slots
        ));
    }
    let bases = [layout::base(prefix, &route.name, "", key)];
    let keys = set.keys(&bases);
    let mut out = vec![keys.len().to_string()];
    out.extend(keys);
    // now ("" = the Redis clock), the call's token, one plan, no settlement, one decision.
    out.extend(["".to_string(), token.to_string(), "1".to_string()]);
    out.push(String::from_utf8_lossy(&set.text(true)).into_owned());
    out.extend(["0", "1", "1 1 "].map(String::from));
    Ok(out)
}
