//! The Redis store. Decisions go through per-node [`lane::Lane`]s, so the decisions in flight
//! at one moment for one node become one call of the decision code (`FCALL` of the Functions
//! library, or `EVALSHA` of the script: `store.scripts`); each waits at most `store.timeout`
//! (one [`Deadline`] per call), after which its route's `on_error` applies. The code is loaded
//! at start; a node that lost it ("Function not found", `NOSCRIPT`: restart, failover, flush)
//! gets it again and the call is retried within the same deadline, so no client ever sees it.
//! Commands fail fast while disconnected instead of queueing, so a dead Redis costs a request
//! at most `store.timeout`. In a cluster each primary has a connection of its own ([`nodes`]),
//! so a dead node costs only the decisions of its own slots.
//!
//! A lane writes its calls on a connection of its own (`direct.rs`), read and written by the
//! lane's task itself, without the client library's routing task in between; the library
//! keeps everything else (and the calls, with `SLIDEGATE_REDIS_CLIENT=fred`).
//!
//! `store.rs` is the handle ([`RedisStore`]). `lane.rs` queues what `batch.rs` describes
//! (`lanes.rs` picks a decision's lane), `call.rs` packs one call (`code.rs`: which code,
//! loaded where; `release.rs` what a failed call keeps to free the slots it may have left
//! behind) and `dispatch.rs` sends it: on the lane's own connection (`direct.rs`;
//! `direct_io.rs` its reads and writes, `direct_dial.rs` (re)connecting, `resp.rs` the
//! protocol) or through the client library; `answer.rs` decodes its reply, `fred_error.rs` sorts the client's errors,
//! `nodes.rs` keeps a worker's connections (`node.rs` one of them; `topology.rs` reads a
//! cluster's slot table, `slots.rs`), `send.rs` sends a command where it belongs and follows
//! redirections (`redirect.rs`), `acks.rs` waits for replicas (`store.replica_acks`;
//! `replicas.rs` how many each master has), `split.rs` decides a cluster request whose keys
//! live in several slots one part per slot, `eviction.rs` the servers' eviction policy and
//! evicted keys (`INFO`), `admin.rs` resets, pings, the refusal index and the reset channel,
//! `sentinel_watch.rs` asks the sentinels which master they name when calls to a sentinel's
//! master fail (a hung master the client library would not leave),
//! `ready.rs` the waits for the connections at start, `script.rs` the code's two forms,
//! `url.rs` the URL forms, `deadline.rs` the deadline.

mod acks;
mod admin;
mod answer;
mod batch;
mod call;
mod code;
mod deadline;
mod direct;
mod direct_dial;
mod direct_io;
mod dispatch;
mod dry;
mod encode;
mod eviction;
mod fred_error;
mod keeper;
mod lane;
mod lanes;
mod node;
mod nodes;
mod ready;
mod redirect;
mod release;
mod replicas;
mod resets;
mod resp;
mod script;
mod send;
mod sentinel_watch;
mod slots;
mod split;
mod store;
mod topology;
mod url;

pub use answer::RedisAnswer;
pub use deadline::Deadline;
pub use eviction::NodeEviction;
pub use script::{decision_library, decision_script, Library};
pub use store::{OnError, RedisStore};
pub use url::fred_url;
