//! A RESP connection on a tokio socket that stays open between commands: the plainest way to
//! talk to Redis from an async test, and the yardstick a store call is measured against.

use std::future::Future;
use std::pin::Pin;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::redis::Resp;

/// One open connection to `127.0.0.1:port`.
pub struct RespConn {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl RespConn {
    /// Connects (no handshake: RESP2, database 0).
    pub async fn connect(port: u16) -> RespConn {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to redis");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        let (read, writer) = stream.into_split();
        RespConn {
            reader: BufReader::new(read),
            writer,
        }
    }

    /// Sends one command and reads its reply.
    pub async fn cmd(&mut self, args: &[&str]) -> Resp {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{}\r\n", a.len(), a));
        }
        self.writer
            .write_all(out.as_bytes())
            .await
            .expect("write command");
        read_reply(&mut self.reader).await.expect("read reply")
    }
}

fn read_reply<'a>(
    r: &'a mut BufReader<OwnedReadHalf>,
) -> Pin<Box<dyn Future<Output = std::io::Result<Resp>> + Send + 'a>> {
    Box::pin(async move {
        let mut line = String::new();
        r.read_line(&mut line).await?;
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1.min(line.len()));
        Ok(match kind {
            "+" => Resp::Simple(rest.to_string()),
            "-" => Resp::Error(rest.to_string()),
            ":" => Resp::Int(rest.parse().unwrap_or(0)),
            "$" => {
                let n: i64 = rest.parse().unwrap_or(-1);
                if n < 0 {
                    Resp::Bulk(None)
                } else {
                    let mut buf = vec![0; n as usize + 2];
                    r.read_exact(&mut buf).await?;
                    buf.truncate(n as usize);
                    Resp::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
                }
            }
            "*" => {
                let n: i64 = rest.parse().unwrap_or(-1);
                let mut items = Vec::new();
                for _ in 0..n.max(0) {
                    items.push(read_reply(r).await?);
                }
                Resp::Array(items)
            }
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("bad reply {line:?}"),
                ))
            }
        })
    })
}
