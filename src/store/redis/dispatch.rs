//! Where one packed decision call goes ([`dispatch`]): on the lane's own connection
//! ([`super::direct`]) when the call is for the lane's own node and that connection is up,
//! else through the client library ([`super::send`], which also follows a cluster's
//! redirections). Either way the reply and its errors are the same values, so what the caller
//! does next (loading lost code, splitting a refused cross-slot call, waiting for replicas)
//! does not depend on the path.

use fred::error::Error as FredError;
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, Key, Value};

use super::acks::{AckPolicy, Acks};
use super::direct::{Direct, Outcome};
use super::fred_error::map_error;
use super::nodes::Nodes;
use super::resp::{push_array, push_bulk, push_key, push_value};
use super::send::{send, OnTryAgain, Route};
use super::slots::slot_of;

/// One call: `name` (`EVALSHA` or `FCALL`) of `code` on `keys` with `args`.
pub struct Call<'a> {
    /// `EVALSHA` or `FCALL`.
    pub name: &'static str,
    /// The script's SHA or the function's name.
    pub code: &'a str,
    /// KEYS.
    pub keys: &'a [Key],
    /// ARGV.
    pub args: &'a [Value],
    /// What the call does when a slot's migration answers `TRYAGAIN`.
    pub try_again: OnTryAgain,
}

/// Sends `call` to `node` (a cluster primary: its keys may span its slots) or, without one, to
/// the node serving its first key; `direct` is the lane's own connection when the call is for
/// the lane's own node (`None` otherwise). With `acks`, `WAIT` follows the call.
pub async fn dispatch(
    nodes: &Nodes,
    direct: Option<&Direct>,
    node: Option<&Server>,
    call: Call<'_>,
    acks: Option<AckPolicy>,
) -> Result<(Vec<i64>, Option<Acks>), FredError> {
    if let Some(direct) = direct {
        let write = |out: &mut Vec<u8>| write_call(out, &call, node.is_some());
        if let Outcome::Done(done) = direct.call(write, acks).await {
            if let Err(e) = &done {
                nodes.note_failure(&map_error(e.clone()));
            }
            return done;
        }
    }
    let Call {
        name,
        code,
        keys,
        args,
        try_again,
    } = call;
    let slot = keys.first().map_or(0, |k| slot_of(k.as_bytes()));
    let mut command = Vec::with_capacity(2 + keys.len() + args.len());
    command.push(Value::from(code));
    let route = if let Some(server) = node {
        // Redis checks declared keys for one slot even under allow-cross-slot-keys: a call
        // spanning slots of one node passes its keys after the arguments (lua/decide.lua).
        command.push(Value::from(0));
        command.extend(args.iter().cloned());
        command.extend(keys.iter().cloned().map(Value::from));
        Route::Node(server.clone())
    } else {
        command.push(Value::from(keys.len() as i64));
        command.extend(keys.iter().cloned().map(Value::from));
        command.extend(args.iter().cloned());
        Route::Slot(slot)
    };
    // A custom command on the node's own client ([`super::send`]), which fails fast while
    // disconnected and follows a cluster's redirections within the deadline.
    let custom = CustomCommand::new_static(name, ClusterHash::Custom(slot), false);
    // Boxed: the command's future is large, and every future that waits on this one (the
    // attempt, its deadline, the lane's call) would otherwise hold a copy and move it.
    let sent = Box::pin(send(nodes, route, (custom, command), acks, try_again)).await;
    let reply: Vec<i64> = sent.reply?.convert()?;
    Ok((reply, sent.acks))
}

/// Appends `call` in RESP, its keys after its arguments when it spans a node's slots
/// (`keys_last`), as the client library's path sends it; `false` for an argument RESP2 cannot
/// carry as a bulk string.
fn write_call(out: &mut Vec<u8>, call: &Call<'_>, keys_last: bool) -> bool {
    push_array(out, 3 + call.keys.len() + call.args.len());
    push_bulk(out, call.name.as_bytes());
    push_bulk(out, call.code.as_bytes());
    let declared = if keys_last { 0 } else { call.keys.len() };
    push_value(out, &Value::Integer(declared as i64));
    if keys_last {
        let args = call.args.iter().all(|a| push_value(out, a));
        call.keys.iter().for_each(|k| push_key(out, k));
        args
    } else {
        call.keys.iter().for_each(|k| push_key(out, k));
        call.args.iter().all(|a| push_value(out, a))
    }
}
