//! Observability end to end: the real proxy binary in front of real upstream processes (the rmcp
//! fixture over HTTP and over stdio), driven by real rmcp clients, watched through its admin
//! listener — `/metrics` parsed series by series, `/readyz`, `/status`. (A real Prometheus
//! evaluating every dashboard panel query is the interop tier's `prometheus` module.)
//!
//! Counters are compared as deltas between two scrapes around a scripted workload. What changes
//! on its own time — gauges the proxy samples once a second, an upstream noticed down or up — is
//! polled for with a deadline, never slept for. Shared steps: `support::observe`. (Series under
//! 10,000 distinct URIs: the scale tier.)

mod eras;
mod readiness;
mod workload;
