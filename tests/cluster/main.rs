//! The cluster tier: `cargo test --test cluster`.

#[path = "../support/mod.rs"]
pub mod support;

mod cache;
