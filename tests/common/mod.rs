//! Compatibility for a test file written against the old `tests/common` (`mod common;` in a
//! top-level `tests/*.rs`): the same harness, `tests/support`, under its old name, until the file
//! is folded into a tier (`tests/fast/` or `tests/interop/`: move it there, add `mod NAME;` to the
//! tier's `main.rs`, write `crate::support::` for `common::`). New tests go into a tier directly.
#![allow(dead_code, unused_imports)]

#[path = "../support/mod.rs"]
mod support;

pub use support::*;
