//! What the hardening tests share: the memory store, and one route that takes every path to the
//! test upstream.

pub const MEMORY: &str = "backend = \"memory\"";

pub const ALL: &str = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
