use super::*;

#[test]
fn a_failure_round_trips_through_its_parts() {
    for failure in [
        TokenFailure::Unreachable,
        TokenFailure::TimedOut,
        TokenFailure::Refused(401),
        TokenFailure::Unusable,
        TokenFailure::NoSubject,
    ] {
        assert_eq!(TokenFailure::from_parts(failure.kind(), failure.status()), Some(failure));
    }
}
