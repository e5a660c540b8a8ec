//! Redis bytes per key: `MEMORY USAGE key SAMPLES 0` over a plain connection of its own.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

/// Keys whose Redis memory is sampled per algorithm.
const MEMORY_SAMPLES: usize = 500;

/// `MEMORY USAGE key SAMPLES 0` over one connection; `None` for a key that is gone.
pub struct MemoryProbe {
    reader: BufReader<TcpStream>,
}

impl MemoryProbe {
    pub fn connect(port: u16) -> MemoryProbe {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("Redis answers");
        MemoryProbe {
            reader: BufReader::new(stream),
        }
    }

    fn bytes(&mut self, key: &str) -> Option<u64> {
        let args = ["MEMORY", "USAGE", key, "SAMPLES", "0"];
        let mut command = format!("*{}\r\n", args.len());
        for a in args {
            command.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.reader
            .get_mut()
            .write_all(command.as_bytes())
            .expect("write to Redis");
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read from Redis");
        line.trim_end().strip_prefix(':')?.parse().ok()
    }

    /// Mean bytes per key over up to [`MEMORY_SAMPLES`] keys spread over the key space, and
    /// how many keys were found.
    pub fn bytes_per_key(&mut self, keys: &[String]) -> (f64, usize) {
        let step = (keys.len() / MEMORY_SAMPLES).max(1);
        let sizes: Vec<u64> = keys
            .iter()
            .step_by(step)
            .filter_map(|k| self.bytes(k))
            .collect();
        (
            sizes.iter().sum::<u64>() as f64 / sizes.len().max(1) as f64,
            sizes.len(),
        )
    }
}
