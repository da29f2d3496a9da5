use std::time::Duration;

use super::labels::{policy_label, upstream_label};
use super::*;
use crate::namespace;
use crate::protocol::Era;

/// A 2025-11-25 request over HTTP.
const HTTP: Hop = Hop { version: "2025-11-25", transport: "tcp" };

const FAMILIES: &[&str] = &[
    "mcp_proxy_build_info",
    "mcp_proxy_downstream_requests_total",
    "mcp_proxy_downstream_request_duration_seconds",
    "mcp_proxy_upstream_requests_total",
    "mcp_proxy_upstream_request_duration_seconds",
    "mcp_proxy_upstream_up",
    "mcp_proxy_upstream_sessions",
    "mcp_proxy_upstream_sessions_reclaimed_total",
    "mcp_proxy_upstream_reconnects_total",
    "mcp_proxy_catalog_resources",
    "mcp_proxy_catalog_templates",
    "mcp_proxy_catalog_unlisted_total",
    "mcp_proxy_cache_hits_total",
    "mcp_proxy_cache_misses_total",
    "mcp_proxy_cache_inserts_total",
    "mcp_proxy_cache_evictions_total",
    "mcp_proxy_cache_invalidations_total",
    "mcp_proxy_cache_entries",
    "mcp_proxy_cache_weighted_bytes",
    "mcp_proxy_cache_shared_events_total",
    "mcp_proxy_cache_shared_up",
    "mcp_proxy_downstream_sessions",
    "mcp_proxy_downstream_subscriptions",
    "mcp_proxy_upstream_subscriptions",
    "mcp_proxy_notifications_received_total",
    "mcp_proxy_notifications_delivered_total",
    "mcp_proxy_notifications_dropped_total",
    "mcp_proxy_policy_denials_total",
    "mcp_proxy_served_bytes_total",
    "mcp_proxy_relay_unattributed_total",
    "mcp_proxy_rate_limited_total",
    "mcp_proxy_cluster_redis_up",
    "mcp_proxy_cluster_replicas",
    "mcp_proxy_cluster_redis_failures_total",
    "mcp_proxy_cluster_answers_total",
    "mcp_proxy_cluster_forwards_total",
    "mcp_proxy_listener_connections",
    "mcp_proxy_cluster_redis_rejected_total",
    "mcp_proxy_auth_refused_total",
    "mcp_proxy_request_bodies_cut_total",
    "mcp_proxy_denials_total",
    "mcp_proxy_audit_dropped_total",
    "mcp_server_operation_duration_seconds",
    "mcp_client_operation_duration_seconds",
];

/// One call of every recording method, with `upstream` wherever an upstream name goes.
fn exercise_every_method(metrics: &Metrics, upstream: &str) -> SessionGuard {
    let ms = Duration::from_millis(3);
    metrics.downstream_request("resources/read", "ok", ms, HTTP);
    metrics.upstream_request(upstream, "resources/read", "upstream_timeout", ms, HTTP);
    metrics.upstream_configured(upstream);
    metrics.set_upstream_up(upstream, true);
    metrics.set_upstream_sessions(upstream, 1);
    metrics.upstream_session_reclaimed(upstream);
    metrics.upstream_reconnected(upstream);
    metrics.set_catalog_size(upstream, 12, 2);
    metrics.catalog_entry_unlisted(upstream);
    metrics.cache_hit(upstream);
    metrics.cache_miss(upstream);
    metrics.cache_insert(upstream);
    metrics.cache_eviction(EvictionCause::Size);
    metrics.cache_invalidation(InvalidationCause::Updated, 2);
    metrics.set_cache_size(3, 4096);
    metrics.shared_cache(SharedCacheEvent::Fill);
    metrics.set_shared_cache_up(true);
    metrics.set_downstream_subscriptions(upstream, 5);
    metrics.set_upstream_subscriptions(upstream, 1);
    metrics.notification_received(upstream, NotificationKind::Updated);
    metrics.notification_delivered(NotificationKind::Updated);
    metrics.notification_dropped(NotificationKind::ListChanged);
    metrics.policy_denied(DenialAction::Read, Some("team-a.toml"));
    metrics.bytes_served(upstream, 100);
    metrics.relay_unattributed(upstream, "log");
    metrics.rate_limited("reads", "upstream", Some(upstream));
    metrics.cluster_replica("replica-1");
    metrics.cluster_redis_up("replica-1", true);
    metrics.cluster_replicas("replica-1", 3);
    metrics.cluster_redis_failure("replica-1");
    metrics.cluster_answer("replica-1", AnswerOutcome::Forwarded);
    metrics.cluster_forward("forwarded");
    metrics.listener_connections("peer", 1);
    metrics.redis_rejected(SealedKind::CacheEntry);
    metrics.auth_refused("expired");
    metrics.request_body_cut("body_timeout");
    metrics.denied(DenialKind::Call);
    metrics.audit_dropped();
    metrics.downstream_session(Transport::Http, Era::Modern)
}

/// Every series line of a scrape (`name{labels} value`).
fn series(text: &str) -> Vec<&str> {
    text.lines().filter(|line| !line.starts_with('#') && !line.is_empty()).collect()
}

/// Every label value in a scrape.
fn label_values(text: &str) -> Vec<String> {
    let mut values = Vec::new();
    for line in series(text) {
        let Some((_, rest)) = line.split_once('{') else { continue };
        let labels = &rest[..rest.rfind('}').expect("closing brace")];
        values.extend(
            labels
                .split("\",")
                .filter_map(|pair| pair.split_once("=\""))
                .map(|(_, v)| v.trim_end_matches('"').to_string()),
        );
    }
    values
}

#[test]
fn every_family_is_registered_and_rendered_after_one_call_of_each_method() {
    let metrics = Metrics::new();
    let mut names: Vec<&str> = metrics.family_names().iter().map(String::as_str).collect();
    let mut expected = FAMILIES.to_vec();
    names.sort_unstable();
    expected.sort_unstable();
    assert_eq!(names, expected);

    let _session = exercise_every_method(&metrics, "docs");
    let text = metrics.render();
    for family in FAMILIES {
        assert!(text.contains(&format!("# TYPE {family} ")), "{family} missing from:\n{text}");
        assert!(series(&text).iter().any(|line| line.starts_with(family)), "{family} has no series");
    }
    assert!(text.contains(&format!("mcp_proxy_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"))));
    assert!(text.contains("mcp_proxy_downstream_sessions{era=\"2026-07-28\",transport=\"http\"} 1"));
    assert!(text.contains("mcp_proxy_cache_invalidations_total{cause=\"updated\"} 2"));
    assert!(text.contains("mcp_proxy_policy_denials_total{action=\"read\",policy=\"team-a.toml\"} 1"));
}

#[test]
fn known_label_sets_start_at_zero() {
    let metrics = Metrics::new();
    metrics.upstream_configured("docs");
    let text = metrics.render();
    for line in [
        "mcp_proxy_downstream_requests_total{method=\"resources/read\",outcome=\"upstream_timeout\"} 0",
        "mcp_proxy_cache_evictions_total{cause=\"expired\"} 0",
        "mcp_proxy_notifications_dropped_total{kind=\"updated\"} 0",
        "mcp_proxy_policy_denials_total{action=\"subscribe\",policy=\"default\"} 0",
        "mcp_proxy_upstream_up{upstream=\"docs\"} 0",
        "mcp_proxy_upstream_reconnects_total{upstream=\"docs\"} 0",
        "mcp_proxy_auth_refused_total{reason=\"bad_signature\"} 0",
        "mcp_proxy_denials_total{kind=\"template\"} 0",
        "mcp_proxy_audit_dropped_total 0",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
}

#[test]
fn a_session_is_counted_while_its_guard_lives() {
    let metrics = Metrics::new();
    let line = |n| format!("mcp_proxy_downstream_sessions{{era=\"2025\",transport=\"stdio\"}} {n}");
    let first = metrics.downstream_session(Transport::Stdio, Era::Legacy);
    let second = metrics.downstream_session(Transport::Stdio, Era::Legacy);
    assert!(metrics.render().contains(&line(2)));
    drop(first);
    drop(second);
    assert!(metrics.render().contains(&line(0)));
}

#[test]
fn upstream_labels_are_upstream_names_or_invalid() {
    fn check(input: &str, expected: &str) {
        assert_eq!(upstream_label(input), expected, "{input}");
    }
    check("docs", "docs");
    check("gh-2", "gh-2");
    check("docs+file:///guide.md", "invalid");
    check("file:///etc/passwd", "invalid");
    check("urn:note:7", "invalid");
    check("Docs", "invalid");
    check("", "invalid");
}

#[test]
fn policy_labels_are_file_names_default_or_other() {
    fn check(input: Option<&str>, expected: &str) {
        assert_eq!(policy_label(input), expected, "{input:?}");
    }
    check(None, "default");
    check(Some("team-a.toml"), "team-a.toml");
    check(Some("teams/b_1.toml"), "teams/b_1.toml");
    check(Some("docs+file:///guide.md"), "other");
    check(Some("Bearer abc def"), "other");
    check(Some(""), "other");
    check(Some(&"a".repeat(129)), "other");
}

#[test]
fn no_label_value_is_a_uri_even_when_a_uri_is_passed_for_an_upstream() {
    let metrics = Metrics::new();
    let _good = exercise_every_method(&metrics, "docs");
    let _bad = exercise_every_method(&metrics, "docs+file:///secret/plan.md");
    metrics.policy_denied(DenialAction::List, Some("mem+urn:note:7"));
    let values = label_values(&metrics.render());
    assert!(values.contains(&"invalid".to_string()) && values.contains(&"other".to_string()));
    for value in values {
        assert!(!value.contains(':'), "label value {value:?} could be a URI");
    }
}

#[test]
fn cardinality_stays_fixed_over_ten_thousand_distinct_uris() {
    let metrics = Metrics::new();
    let read = |uri: &str| {
        let started = Duration::from_micros(80);
        let upstream = namespace::split(uri).map_or("unknown", |(name, _)| name);
        metrics.cache_miss(upstream);
        metrics.upstream_request(upstream, "resources/read", "ok", started, HTTP);
        metrics.cache_insert(upstream);
        metrics.bytes_served(upstream, uri.len() as u64);
        metrics.notification_received(upstream, NotificationKind::Updated);
        metrics.cache_invalidation(InvalidationCause::Updated, 1);
        metrics.downstream_request("resources/read", "ok", started, HTTP);
    };
    read("docs+file:///warm-up.md");
    read("mem+urn:note:warm-up");
    let before = series(&metrics.render()).len();
    for n in 0..10_000 {
        read(&format!("docs+file:///notes/{n}.md"));
        read(&format!("mem+urn:note:{n}"));
    }
    let text = metrics.render();
    assert_eq!(series(&text).len(), before);
    assert!(text.contains("mcp_proxy_cache_misses_total{upstream=\"docs\"} 10001"));
}

#[test]
fn outcome_is_ok_or_the_error_kind() {
    assert_eq!(outcome(&Ok::<(), ProxyError>(())), "ok");
    assert_eq!(outcome::<()>(&Err(ProxyError::not_found("docs+file:///a"))), "not_found");
    assert_eq!(outcome::<()>(&Err(ProxyError::InvalidCursor)), "invalid_cursor");
    for kind in OUTCOMES {
        assert!(!kind.contains(':'));
    }
}

/// The semantic conventions' histograms: their names, their buckets, `mcp_method_name` and
/// `error_type` (empty for a success, the outcome otherwise).
#[test]
fn the_semantic_conventions_histograms_are_recorded_with_each_request() {
    let metrics = Metrics::new();
    metrics.downstream_request("resources/read", "ok", Duration::from_millis(15), HTTP);
    metrics.upstream_request("docs", "tools/call", "upstream_timeout", Duration::from_secs(3), HTTP);
    let text = metrics.render();
    let line = |family: &str, method: &str, error: &str, le: &str| {
        series(&text)
            .into_iter()
            .find(|line| {
                line.starts_with(&format!("{family}_bucket{{"))
                    && line.contains(&format!("mcp_method_name=\"{method}\""))
                    && line.contains(&format!("error_type=\"{error}\""))
                    && line.contains(&format!("le=\"{le}\""))
            })
            .unwrap_or_else(|| panic!("no {family} {method} {error} {le} in:\n{text}"))
            .to_string()
    };
    assert!(line("mcp_server_operation_duration_seconds", "resources/read", "", "0.01").ends_with(" 0"));
    assert!(line("mcp_server_operation_duration_seconds", "resources/read", "", "0.02").ends_with(" 1"));
    assert!(line("mcp_client_operation_duration_seconds", "tools/call", "upstream_timeout", "2").ends_with(" 0"));
    assert!(line("mcp_client_operation_duration_seconds", "tools/call", "upstream_timeout", "5").ends_with(" 1"));
    assert!(!text.contains("mcp_client_operation_duration_seconds_bucket{upstream"), "no upstream label");
    assert_eq!((SEMCONV_BUCKETS.first(), SEMCONV_BUCKETS.last()), (Some(&0.01), Some(&300.0)));
}

#[test]
fn buckets_span_a_cache_hit_to_a_slow_upstream_read() {
    assert_eq!(LATENCY_BUCKETS.first(), Some(&0.00005));
    assert_eq!(LATENCY_BUCKETS.last(), Some(&30.0));
    assert!(LATENCY_BUCKETS.windows(2).all(|pair| pair[0] < pair[1]));
}

fn check_hop(version: Option<&str>, transport: Transport, expected: (&str, &str)) {
    let hop = Hop::new(version, transport);
    assert_eq!((hop.version, hop.transport), expected, "{version:?} {transport:?}");
}

/// `mcp_protocol_version` is a version the proxy knows, any other (or none) `other`;
/// `network_transport` is `pipe` for stdio, `tcp` for HTTP: bounded, whatever a host sends.
#[test]
fn the_semantic_conventions_histograms_are_labelled_by_version_and_transport() {
    check_hop(Some("2026-07-28"), Transport::Http, ("2026-07-28", "tcp"));
    check_hop(Some("2025-06-18"), Transport::Stdio, ("2025-06-18", "pipe"));
    check_hop(Some("1999-01-01"), Transport::Http, ("other", "tcp"));
    check_hop(Some("docs+file:///secret"), Transport::Http, ("other", "tcp"));
    check_hop(None, Transport::Stdio, ("other", "pipe"));
    let metrics = Metrics::new();
    let piped = Hop::new(Some("2025-03-26"), Transport::Stdio);
    metrics.downstream_request("tools/call", "ok", Duration::from_millis(15), piped);
    metrics.upstream_request(
        "docs",
        "resources/read",
        "ok",
        Duration::from_millis(15),
        Hop::new(Some("x"), Transport::Http),
    );
    let text = metrics.render();
    assert!(
        text.contains("mcp_server_operation_duration_seconds_count{error_type=\"\",mcp_method_name=\"tools/call\",mcp_protocol_version=\"2025-03-26\",network_transport=\"pipe\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("mcp_client_operation_duration_seconds_count{error_type=\"\",mcp_method_name=\"resources/read\",mcp_protocol_version=\"other\",network_transport=\"tcp\"} 1"),
        "{text}"
    );
}
