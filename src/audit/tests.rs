use super::*;

#[test]
fn times_are_rfc3339_utc() {
    let check = |seconds: u64, expected: &str| {
        let time = UNIX_EPOCH + Duration::from_millis(seconds * 1000 + 7);
        assert_eq!(rfc3339(time), expected);
    };
    check(0, "1970-01-01T00:00:00.007Z");
    check(951_782_400, "2000-02-29T00:00:00.007Z");
    check(1_785_240_000, "2026-07-28T12:00:00.007Z");
}

#[test]
fn a_refused_request_is_its_denial_alone_and_a_partial_one_is_both() {
    let (audit, mut events) = Audit::for_test();
    let read = Event::new(Kind::Read, "not_found").principal("bob").method("resources/read").uri("docs+x:/a");
    let denial = scope::Denial { kind: DenialKind::Read, target: "docs+x:/a".into(), upstream: Some("docs".into()) };
    audit.request(scope::Notes { upstream: None, denials: vec![denial.clone()], policy_file: None }, || read);
    let only = events.try_recv().unwrap();
    assert_eq!((only.event, only.outcome, only.denied), (Kind::Denial, "denied", Some("read")));
    assert!(events.try_recv().is_err());
    let listen = Event::new(Kind::Listen, "ok").principal("bob");
    let denial = scope::Denial { kind: DenialKind::Subscribe, ..denial };
    audit.request(scope::Notes { upstream: None, denials: vec![denial], policy_file: None }, || listen);
    let kinds = [events.try_recv().unwrap().event, events.try_recv().unwrap().event];
    assert_eq!(kinds, [Kind::Denial, Kind::Listen]);
    let line = serde_json::to_string(&Event::new(Kind::Read, "ok").session(Some("secret-session"))).unwrap();
    assert!(!line.contains("secret-session") && line.contains("\"session\":\""), "{line}");
}

#[test]
fn a_full_queue_drops_and_counts_and_never_waits() {
    let (audit, mut events) = Audit::for_test();
    for _ in 0..20 {
        audit.record(Event::new(Kind::Read, "ok"));
    }
    assert!(audit.inner.metrics.render().contains("mcp_proxy_audit_dropped_total 4"));
    let mut kept = 0;
    while events.try_recv().is_ok() {
        kept += 1;
    }
    assert_eq!(kept, 16);
}

#[test]
fn every_refusal_reason_is_a_known_label() {
    use crate::auth::Rejection;
    use crate::auth::jwt::JwtRejection as Jwt;
    let jwt = [
        Jwt::Malformed,
        Jwt::Algorithm,
        Jwt::UnknownKey,
        Jwt::Signature,
        Jwt::Expired,
        Jwt::NotYetValid,
        Jwt::Issuer,
        Jwt::Audience,
        Jwt::Claims,
    ];
    let all = [Rejection::Missing, Rejection::Malformed, Rejection::UnknownToken]
        .into_iter()
        .chain(jwt.into_iter().map(Rejection::InvalidJwt));
    let labels: Vec<&str> = all.map(Rejection::label).collect();
    assert_eq!(labels, crate::metrics::AUTH_REFUSAL_REASONS);
}

impl Audit {
    /// A trail whose events are kept in a queue the test reads.
    fn for_test() -> (Audit, mpsc::Receiver<Event>) {
        let (queue, events) = mpsc::channel(16);
        let inner = Inner { queue: Some(queue), metrics: Metrics::new(), dropping: AtomicBool::new(false) };
        (Audit { inner: Arc::new(inner) }, events)
    }
}
