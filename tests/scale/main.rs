//! The scale tier: `cargo test --test scale`. Bounds that only show at size or under many
//! repetitions, with the project's own parts only (no third-party peers): 10,000 distinct URIs
//! through the proxy, a directory over the folder server's entry cap, thousands of
//! symlink/FIFO/rename races against the folder server. Slow by design (minutes in a debug build).

#[path = "../support/mod.rs"]
pub mod support;

mod cardinality;
mod folder_races;
mod serve_dir;
