//! The cluster tier: `cargo test --test cluster`. Replicas of the proxy binary behind a real
//! load balancer (haproxy, round-robin) sharing a real Redis (`tests/support/replicas.rs`), real
//! upstreams and real hosts. Needs Debian's `redis-server` and `haproxy` (`.ci/install-cluster.sh`).

#[path = "../support/mod.rs"]
pub mod support;

mod sessions;
