//! `[cluster]`: each replica's mailbox, a Redis pub/sub channel `<prefix>mailbox:<replica>` on
//! which the other replicas post it letters (today: a host's answer to a request this replica
//! sent, which the load balancer took to another replica). [`Mailbox::post`] signs a letter for
//! one replica and publishes it; [`Mailbox::run`] (the `cluster-mailbox` task) hears this
//! replica's channel and hands each letter whose tag verifies to its reader, in order.
//!
//! A letter on the wire is `<tag> <body>`: the tag is 16 bytes of HMAC-SHA256 (with the
//! cluster's mailbox key) over the addressee and the body, in hex. Delivery is at most once: a
//! letter posted while its addressee does not listen is lost, and its poster is told no one
//! heard it; a letter lost to a full queue or a dropped connection is reported to the reader as
//! [`Letter::Lost`].
//!
//! Invariant: a letter is handed to a reader only if a replica of this cluster (one holding its
//! secret) wrote it for this replica; the body is the poster's to keep free of secrets (Redis
//! carries it in clear).

use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use redis::aio::ConnectionManagerConfig;
use redis::{AsyncCommands, PushInfo, PushKind, RedisResult, Value};
use sha2::Sha256;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{COMMAND_TIMEOUT, Cluster};

/// Letters heard and not yet read; past it, letters are lost.
const MAILBOX_QUEUE: usize = 256;
/// How often the subscription is tried while Redis cannot be reached.
const RETRY: Duration = Duration::from_secs(1);
/// Bytes of the tag (hex: twice as many characters).
const TAG: usize = 16;

/// Posts letters to replicas and reads this replica's; a cheap `Clone`.
#[derive(Clone)]
pub struct Mailbox {
    cluster: Cluster,
    key: [u8; 32],
}

/// What the reader of this replica's mailbox is handed.
#[derive(Debug, PartialEq, Eq)]
pub enum Letter {
    /// A letter a replica of this cluster wrote for this one: its body.
    Read(Vec<u8>),
    /// A letter was lost: its tag did not verify, the queue was full, or the subscription's
    /// connection dropped (what was published meanwhile was not heard).
    Lost,
}

/// What became of a posted letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    /// The addressee listens on its mailbox.
    Heard,
    /// No one listens on it (the replica is gone), or Redis could not be reached.
    Unheard,
}

impl Mailbox {
    pub fn new(cluster: Cluster) -> Self {
        let key = cluster.keys().mailbox();
        Self { cluster, key }
    }

    /// Sign `body` for `replica` and publish it on its mailbox.
    pub async fn post(&self, replica: &str, body: &[u8]) -> Posted {
        let mut letter = hex(&self.tag(replica, body)).into_bytes();
        letter.push(b' ');
        letter.extend_from_slice(body);
        let mut redis = self.cluster.redis();
        let published: RedisResult<i64> =
            match tokio::time::timeout(COMMAND_TIMEOUT, redis.publish(self.channel(replica), letter)).await {
                Ok(result) => result,
                Err(_) => {
                    self.cluster.note_timeout();
                    return Posted::Unheard;
                }
            };
        self.cluster.note(&published);
        match published {
            Ok(listeners) if listeners > 0 => Posted::Heard,
            _ => Posted::Unheard,
        }
    }

    /// Hear this replica's mailbox until `shutdown`, handing each letter to `read` in order.
    pub async fn run<F, Fut>(self, shutdown: CancellationToken, mut read: F)
    where
        F: FnMut(Letter) -> Fut,
        Fut: Future<Output = ()>,
    {
        let (sender, mut heard) = mpsc::channel::<Option<PushInfo>>(MAILBOX_QUEUE);
        let overflow = sender.clone();
        let config = ConnectionManagerConfig::new().set_automatic_resubscription().set_push_sender(
            move |info: PushInfo| -> Result<(), ()> {
                if let Err(mpsc::error::TrySendError::Full(_)) = sender.try_send(Some(info)) {
                    // The reader is behind: it hears of the loss once it catches up.
                    let _ = overflow.try_send(None);
                }
                Ok(())
            },
        );
        let channel = self.channel(self.cluster.replica_id());
        let mut retry = tokio::time::interval(RETRY);
        let _connection = loop {
            tokio::select! {
                _ = retry.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            match self.cluster.connect(config.clone()).await {
                Ok(mut connection) => match connection.subscribe(&channel).await {
                    Ok(()) => break connection,
                    Err(error) => tracing::debug!(error = %error, "cluster: mailbox not subscribed yet"),
                },
                Err(error) => tracing::debug!(error = %error, "cluster: mailbox not connected yet"),
            }
        };
        loop {
            let info = tokio::select! {
                info = heard.recv() => info,
                _ = shutdown.cancelled() => return,
            };
            let Some(info) = info else { return };
            if let Some(letter) = self.open(info) {
                read(letter).await;
            }
        }
    }

    /// The letter a push carries, if it is one (`None`: a push of another kind).
    fn open(&self, info: Option<PushInfo>) -> Option<Letter> {
        let Some(info) = info else { return Some(Letter::Lost) };
        match info.kind {
            PushKind::Message => {}
            PushKind::Disconnection => {
                tracing::debug!("cluster: the mailbox's connection dropped; letters may be lost");
                return Some(Letter::Lost);
            }
            _ => return None,
        }
        let Some(Value::BulkString(letter)) = info.data.get(1) else { return Some(Letter::Lost) };
        Some(self.verify(letter).map_or(Letter::Lost, Letter::Read))
    }

    /// The body of `letter` if its tag is this cluster's for this replica.
    fn verify(&self, letter: &[u8]) -> Option<Vec<u8>> {
        let space = letter.iter().position(|b| *b == b' ')?;
        let (tag, body) = (&letter[..space], &letter[space + 1..]);
        let tag = unhex(tag)?;
        let mac = self.mac(self.cluster.replica_id(), body);
        if tag.len() != TAG || mac.verify_truncated_left(&tag).is_err() {
            tracing::debug!("cluster: a letter that no replica of this cluster wrote was dropped");
            return None;
        }
        Some(body.to_vec())
    }

    fn tag(&self, replica: &str, body: &[u8]) -> [u8; TAG] {
        let full = self.mac(replica, body).finalize().into_bytes();
        full[..TAG].try_into().expect("16 bytes")
    }

    fn mac(&self, replica: &str, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(replica.as_bytes());
        mac.update(b"\0");
        mac.update(body);
        mac
    }

    fn channel(&self, replica: &str) -> String {
        self.cluster.key(&["mailbox", replica])
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let text = std::str::from_utf8(text).ok()?;
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClusterConfig, Secret};
    use crate::metrics::Metrics;

    /// A mailbox of replica `replica` of the cluster of `secret` (Redis is never reached).
    fn mailbox(secret: &str, replica: &str) -> Mailbox {
        let config = ClusterConfig {
            redis_url: Secret::new("redis://127.0.0.1:1/0"),
            redis_password: None,
            secret: Secret::new(secret),
            replica_id: replica.to_owned(),
            heartbeat: Duration::from_secs(1),
            replica_ttl: Duration::from_secs(3),
            ready_without_redis: true,
            advertise_url: None,
            peer_tls: None,
        };
        Mailbox::new(Cluster::new(&config, Metrics::new()).expect("a cluster handle"))
    }

    fn letter(tag: &[u8; TAG], body: &[u8]) -> Vec<u8> {
        let mut letter = hex(tag).into_bytes();
        letter.push(b' ');
        letter.extend_from_slice(body);
        letter
    }

    #[tokio::test]
    async fn only_a_letter_this_cluster_wrote_for_this_replica_is_read() {
        const SECRET: &str = "one secret, long enough for a key";
        let (one, two) = (mailbox(SECRET, "r1"), mailbox(SECRET, "r2"));
        let other_cluster = mailbox("another secret, long enough as well", "r2");
        let body = b"{\"answer\":1}";
        assert_eq!(two.verify(&letter(&one.tag("r2", body), body)), Some(body.to_vec()));
        assert_eq!(one.verify(&letter(&one.tag("r2", body), body)), None, "written for another replica");
        assert_eq!(other_cluster.verify(&letter(&one.tag("r2", body), body)), None, "another cluster's");
        assert_eq!(two.verify(&letter(&one.tag("r2", body), b"{\"answer\":2}")), None, "altered");
        for forged in [&b""[..], b" ", b"00 body", b"zz body", b"no-space-at-all"] {
            assert_eq!(two.verify(forged), None, "{forged:?}");
        }
    }
}
