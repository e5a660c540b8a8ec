//! Redis Cluster's redirections, read from an error reply: `MOVED` (the slot lives elsewhere
//! now: ask there, and read the slot table again), `ASK` (the slot is migrating and this key
//! already left: ask the target once, after `ASKING`), `TRYAGAIN` (a call touching several
//! keys of a migrating slot, some moved and some not: ask again in a moment). A redirected
//! command did not run, so sending it again charges nothing twice.

use fred::types::config::Server;

/// What an error reply tells the caller to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// The slot is served by `to` now.
    Moved {
        /// The slot.
        slot: u16,
        /// The node that serves it.
        to: Server,
    },
    /// Send this one command to `to`, preceded by `ASKING`.
    Ask {
        /// The migrating slot.
        slot: u16,
        /// The node it is migrating to.
        to: Server,
    },
    /// Send the command again shortly.
    TryAgain,
}

impl Redirect {
    /// The redirection an error reply's text names, if any; `asked` is the node that replied
    /// (its host stands in for an empty one: `MOVED 7 :7001`).
    pub fn parse(reply: &str, asked: &Server) -> Option<Redirect> {
        let mut words = reply.split_whitespace();
        let kind = words.next()?;
        if kind == "TRYAGAIN" {
            return Some(Redirect::TryAgain);
        }
        if kind != "MOVED" && kind != "ASK" {
            return None;
        }
        let slot = words.next()?.parse::<u16>().ok()?;
        let (host, port) = words.next()?.rsplit_once(':')?;
        let port = port.parse::<u16>().ok()?;
        let host = if host.is_empty() {
            asked.host.clone()
        } else {
            host.into()
        };
        let to = Server::new(host, port);
        Some(if kind == "MOVED" {
            Redirect::Moved { slot, to }
        } else {
            Redirect::Ask { slot, to }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirections_are_read_from_the_reply() {
        let asked = Server::new("10.0.0.1", 7000);
        assert_eq!(
            Redirect::parse("MOVED 3999 127.0.0.1:6381", &asked),
            Some(Redirect::Moved {
                slot: 3999,
                to: Server::new("127.0.0.1", 6381)
            })
        );
        assert_eq!(
            Redirect::parse("ASK 12 ::1:7002", &asked),
            Some(Redirect::Ask {
                slot: 12,
                to: Server::new("::1", 7002)
            })
        );
        assert_eq!(
            Redirect::parse("MOVED 7 :7001", &asked),
            Some(Redirect::Moved {
                slot: 7,
                to: Server::new("10.0.0.1", 7001)
            })
        );
        assert_eq!(
            Redirect::parse(
                "TRYAGAIN Multiple keys request during rehashing of slot",
                &asked
            ),
            Some(Redirect::TryAgain)
        );
        for other in [
            "ERR unknown",
            "MOVED x 1:2",
            "ASK 1",
            "MOVED 1 nohost",
            "NOSCRIPT No matching script",
        ] {
            assert_eq!(Redirect::parse(other, &asked), None, "{other}");
        }
    }
}
