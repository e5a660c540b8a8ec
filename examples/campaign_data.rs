//! Generates the data of `bench/campaign`: a user base of `--users` ids (default 270 million)
//! split into four segments by a fixed hash (every user in exactly one), written as portable
//! roaring bitmaps, and a campaign of `--campaign` distinct ids (default 10 million) drawn
//! uniformly from the user base, written as a bitmap too. Prints what it wrote, with the bytes.
//!
//! `cargo run --release --example campaign_data -- DIR [--users N] [--campaign N]`

use std::path::PathBuf;

use roaring::RoaringBitmap;

const SEGMENTS: [(&str, u64); 4] = [("new", 10), ("active", 30), ("dormant", 55), ("vip", 5)];

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .expect("usage: campaign_data DIR [--users N] [--campaign N]"),
    );
    let (mut users, mut campaign) = (270_000_000u32, 10_000_000u32);
    while let Some(flag) = args.next() {
        let value: u32 = args
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number after the flag");
        match flag.as_str() {
            "--users" => users = value,
            "--campaign" => campaign = value,
            other => panic!("unknown flag {other}"),
        }
    }
    std::fs::create_dir_all(&dir).expect("output directory");
    // Segment by a hash of the id, so segments interleave as real ones do (not by id range).
    let mut bitmaps: Vec<RoaringBitmap> = SEGMENTS.iter().map(|_| RoaringBitmap::new()).collect();
    let bucket_of = |id: u32| -> usize {
        let share = mix(id as u64) % 100;
        let mut acc = 0;
        for (i, (_, percent)) in SEGMENTS.iter().enumerate() {
            acc += percent;
            if share < acc {
                return i;
            }
        }
        SEGMENTS.len() - 1
    };
    // Insert in sorted runs per segment: push is fast for ascending ids.
    for id in 0..users {
        let b = bucket_of(id);
        bitmaps[b].try_push(id).expect("ids ascend");
    }
    for ((name, _), members) in SEGMENTS.iter().zip(&bitmaps) {
        let path = dir.join(format!("{name}.roaring"));
        let mut out = Vec::with_capacity(members.serialized_size());
        members.serialize_into(&mut out).expect("serialise");
        std::fs::write(&path, &out).expect("write segment");
        println!("segment {name}: {} ids, {} bytes", members.len(), out.len());
    }
    // The campaign: distinct ids drawn uniformly from the user base.
    let mut ids = RoaringBitmap::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    while ids.len() < campaign as u64 {
        state = mix(state);
        ids.insert((state % users as u64) as u32);
    }
    let mut out = Vec::with_capacity(ids.serialized_size());
    ids.serialize_into(&mut out).expect("serialise");
    std::fs::write(dir.join("campaign.roaring"), &out).expect("write campaign");
    println!("campaign: {} ids, {} bytes", ids.len(), out.len());
}

/// A 64-bit mixer (splitmix64's finaliser): deterministic, well spread.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
