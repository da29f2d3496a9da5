use std::path::Path;

use super::{Root, Sampler};
use crate::config::Config;

fn check(text: &str, env: &[(&str, &str)]) -> Result<Config, Vec<(String, String)>> {
    let lookup = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
    Config::from_toml(text, Path::new("."), &lookup)
        .map_err(|error| error.problems.into_iter().map(|p| (p.at, p.message)).collect())
}

#[test]
fn traces_are_off_unless_an_endpoint_is_given() {
    let config = check("", &[]).expect("valid");
    assert!(!config.telemetry.enabled());
    assert_eq!(config.telemetry.describe(), "traces: off (no OTLP endpoint configured)");
    let config = check("", &[("OTEL_SERVICE_NAME", "x"), ("OTEL_TRACES_SAMPLER", "always_on")]).expect("valid");
    assert!(!config.telemetry.enabled());
}

#[test]
fn the_standard_variables_configure_what_the_file_leaves_out() {
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20s3cret,x-team=a"),
        ("OTEL_SERVICE_NAME", "edge-proxy"),
        ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,service.name=ignored"),
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
    ];
    let telemetry = check("", &env).expect("valid").telemetry;
    assert_eq!(telemetry.endpoint.as_deref(), Some("http://collector:4318/v1/traces"));
    assert_eq!(telemetry.headers[0], ("authorization".into(), "Bearer s3cret".into()));
    assert_eq!(telemetry.service_name, "edge-proxy");
    assert_eq!(telemetry.resource, vec![("deployment.environment".into(), "prod".into())]);
    assert_eq!(telemetry.sampler, Sampler::ParentBased(Root::Ratio(0.25)));
    // Header values are credentials: shown nowhere.
    assert!(!format!("{telemetry:?}").contains("s3cret"));
    assert!(!telemetry.describe().contains("s3cret"));
    assert!(telemetry.describe().contains("headers authorization, x-team"), "{}", telemetry.describe());

    let text = "[telemetry]\ntraces_endpoint = \"https://otlp.example/traces\"\nservice_name = \"from-file\"\nsampler = \"always_on\"\nresource_uris = true\n";
    let telemetry = check(text, &env).expect("valid").telemetry;
    assert_eq!(telemetry.endpoint.as_deref(), Some("https://otlp.example/traces"));
    assert_eq!(telemetry.service_name, "from-file");
    assert_eq!(telemetry.sampler, Sampler::AlwaysOn);
    assert!(telemetry.resource_uris);
    let off = check("[telemetry]\nenabled = false\n", &env).expect("valid");
    assert!(!off.telemetry.enabled());
    assert!(
        !check("", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_SDK_DISABLED", "true")])
            .expect("valid")
            .telemetry
            .enabled()
    );
}

#[test]
fn every_bad_setting_is_reported_at_once() {
    let text = "[telemetry]\nendpoint = \"collector:4318\"\nprotocol = \"grpc\"\nsampler = \"sometimes\"\ncolour = 1\n\n[telemetry.headers]\n\"bad name\" = \"v\"\n";
    let problems = check(text, &[("OTEL_TRACES_SAMPLER_ARG", "2")]).expect_err("invalid");
    let at: Vec<&str> = problems.iter().map(|(at, _)| at.as_str()).collect();
    assert_eq!(
        at,
        ["telemetry.colour", "telemetry.endpoint", "telemetry.protocol", "telemetry.headers", "telemetry.sampler"],
        "{problems:?}"
    );
    let problems = check(
        "",
        &[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
        ],
    )
    .expect_err("invalid");
    assert_eq!(problems, [("OTEL_TRACES_SAMPLER_ARG".to_string(), "`2` is not a ratio between 0 and 1".to_string())]);
}
