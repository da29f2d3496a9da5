//! The session records' indexes against a real `redis-server`: the cluster-wide caps
//! (`server.max_sessions`, `server.max_sessions_per_principal`,
//! `server.max_subscriptions_per_principal`) count exactly the records that live, as the
//! single-process book counts the sessions it has not reaped. A record's lifetime is Redis's
//! expiry, so time passing is what these tests are about: small timeouts, and waits that are
//! the silence of a host.

use std::time::Duration;

use super::{Admission, Records, SubscribeRefused};
use crate::cluster::Cluster;
use crate::cluster::tests::redis_server::Redis;
use crate::config::{ClusterConfig, Secret};
use crate::metrics::Metrics;

/// Records on `redis` whose sessions live `idle` after their last request, `subscribed_idle`
/// while they hold subscriptions.
fn records(redis: &Redis, (idle, subscribed_idle): (Duration, Duration)) -> Records {
    let config = ClusterConfig {
        redis_url: Secret::new(format!("redis://127.0.0.1:{}/0", redis.port)),
        redis_password: None,
        secret: Secret::new("a cluster secret of at least 32 bytes"),
        replica_id: "replica-0".to_owned(),
        heartbeat: Duration::from_secs(1),
        replica_ttl: Duration::from_secs(3),
        ready_without_redis: true,
        advertise_url: None,
        peer_tls: None,
    };
    let cluster = Cluster::new(&config, Metrics::new()).expect("a cluster handle");
    Records::new(cluster, idle, subscribed_idle)
}

/// Admit `session` of `principal` under caps (total, per principal).
async fn admit(records: &Records, session: &str, principal: &str, (total, mine): (usize, usize)) -> Admission {
    records.admit(session, principal, total, mine).await.expect("Redis answers")
}

/// A host says nothing for `quiet`: the records' expiry is what runs meanwhile.
async fn silence(quiet: Duration) {
    tokio::time::sleep(quiet).await;
}

/// Wait (at most 10 s) until none of `sessions` has a record any more.
async fn until_expired(records: &Records, sessions: &[&str]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut live = 0;
        for session in sessions {
            live += usize::from(records.exists(session).await.expect("Redis answers"));
        }
        if live == 0 {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{live} of {sessions:?} still live after 10 s");
        silence(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_session_kept_alive_by_requests_counts_toward_the_caps_however_long_it_lives() {
    let redis = Redis::start().await;
    let (idle, subscribed_idle) = (Duration::from_millis(1000), Duration::from_millis(1500));
    let records = records(&redis, (idle, subscribed_idle));
    assert_eq!(admit(&records, "alice-1", "alice", (1, 1)).await, Admission::Admitted);
    // Requests every 200 ms for more than twice the longest timeout.
    let until = tokio::time::Instant::now() + 2 * subscribed_idle + Duration::from_millis(500);
    while tokio::time::Instant::now() < until {
        silence(Duration::from_millis(200)).await;
        assert!(records.touch("alice-1").await.expect("Redis answers"), "the session's record lives on");
    }
    assert_eq!(
        admit(&records, "bob-1", "bob", (1, 1)).await,
        Admission::OverTotal,
        "the live session still counts toward server.max_sessions"
    );
    assert_eq!(
        admit(&records, "alice-2", "alice", (10, 1)).await,
        Admission::OverPrincipal,
        "the live session still counts toward server.max_sessions_per_principal"
    );
}

#[tokio::test]
async fn a_quiet_subscribed_session_counts_toward_the_caps_exactly_while_its_record_lives() {
    let redis = Redis::start().await;
    let (idle, subscribed_idle) = (Duration::from_millis(300), Duration::from_millis(1500));
    let records = records(&redis, (idle, subscribed_idle));
    assert_eq!(admit(&records, "alice-1", "alice", (10, 10)).await, Admission::Admitted);
    let subscribed = records.subscribe("alice-1", ("alice", "u+x://a"), (10, 10)).await.expect("Redis answers");
    assert_eq!(subscribed, Ok(()));
    // Quiet past the idle timeout, within the subscribed one.
    silence(idle + Duration::from_millis(400)).await;
    assert!(records.exists("alice-1").await.expect("Redis answers"), "the subscribed session's record lives");
    assert_eq!(
        admit(&records, "bob-1", "bob", (1, 10)).await,
        Admission::OverTotal,
        "a subscribed session quiet past the idle timeout still counts toward server.max_sessions"
    );
    assert_eq!(
        admit(&records, "alice-2", "alice", (10, 1)).await,
        Admission::OverPrincipal,
        "it still counts toward server.max_sessions_per_principal"
    );
    assert_eq!(admit(&records, "alice-3", "alice", (10, 10)).await, Admission::Admitted);
    let over = records.subscribe("alice-3", ("alice", "u+x://b"), (10, 1)).await.expect("Redis answers");
    assert_eq!(over, Err(SubscribeRefused::PrincipalFull), "its subscription counts toward the principal's cap");

    until_expired(&records, &["alice-1", "alice-3"]).await;
    assert_eq!(admit(&records, "bob-2", "bob", (1, 1)).await, Admission::Admitted, "an expired record counts no more");
}
