//! A cluster replica's series (Redis reached, replicas seen, answers and requests between
//! replicas, values that did not open) and the listener's connections by kind. Every `replica`
//! label is this process's configured id, one per process.

use super::{AnswerOutcome, Metrics, SealedKind, saturate};

impl Metrics {
    /// This process is replica `replica` of a cluster: its series start (Redis down, 1 replica).
    /// `replica` is the configured id, one per process, so the label is bounded.
    pub fn cluster_replica(&self, replica: &str) {
        let i = &self.inner;
        i.cluster_redis_up.with_label_values(&[replica]).set(0);
        i.cluster_replicas.with_label_values(&[replica]).set(1);
        i.cluster_redis_failures.with_label_values(&[replica]);
        for outcome in AnswerOutcome::ALL {
            i.cluster_answers.with_label_values(&[replica, outcome.label()]);
        }
        for outcome in ["forwarded", "fallback", "failed", "served", "refused"] {
            i.cluster_forwards.with_label_values(&[outcome]);
        }
    }

    pub fn cluster_redis_up(&self, replica: &str, up: bool) {
        self.inner.cluster_redis_up.with_label_values(&[replica]).set(i64::from(up));
    }

    pub fn cluster_replicas(&self, replica: &str, seen: usize) {
        self.inner.cluster_replicas.with_label_values(&[replica]).set(saturate(seen));
    }

    pub fn cluster_redis_failure(&self, replica: &str) {
        self.inner.cluster_redis_failures.with_label_values(&[replica]).inc();
    }

    /// A host's answer to a request a replica sent it met `outcome` on replica `replica`.
    pub fn cluster_answer(&self, replica: &str, outcome: AnswerOutcome) {
        self.inner.cluster_answers.with_label_values(&[replica, outcome.label()]).inc();
    }

    /// A request for a per-principal session held elsewhere (or a retry of a call parked on
    /// another replica), or one sent here; `outcome` is `forwarded`, `fallback`, `failed`,
    /// `served`, `resumed` or `refused`.
    pub fn cluster_forward(&self, outcome: &'static str) {
        self.inner.cluster_forwards.with_label_values(&[outcome]).inc();
    }

    /// `open` connections of `kind` (`host`, `peer`) on the MCP listener.
    pub fn listener_connections(&self, kind: &'static str, open: usize) {
        self.inner.listener_connections.with_label_values(&[kind]).set(saturate(open));
    }

    /// A value of `kind` read from Redis did not open: it is taken as missing.
    pub fn redis_rejected(&self, kind: SealedKind) {
        self.inner.cluster_redis_rejected.with_label_values(&[kind.label()]).inc();
    }
}
