//! `check` on `[cluster] peer_tls`: each thing wrong with the replica's certificate, its key or
//! the cluster's CA is listed at its key, together with the config's other problems.

use super::{EXIT_CONFIG, run, stdout};
use crate::support::proxy::{toml_str, write_config};

/// A CA (`<name>-ca.pem`) and a certificate it issued for 127.0.0.1 (`<name>.pem`, its key
/// `<name>.key`) in `dir`.
fn issue(dir: &std::path::Path, name: &str) -> anyhow::Result<()> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, format!("{name} CA"));
    std::fs::write(dir.join(format!("{name}-ca.pem")), ca.self_signed(&ca_key)?.pem())?;
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate()?;
    let certificate = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.signed_by(&key, &issuer)?;
    std::fs::write(dir.join(format!("{name}.pem")), certificate.pem())?;
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem())?;
    Ok(())
}

/// Missing files, a certificate another CA issued, a key that is not the certificate's and an
/// `http://` advertised URL are each listed at their key beside an unset cluster secret (exit
/// 78); a right set (an `https://` URL) passes.
#[tokio::test]
async fn check_lists_what_is_wrong_with_peer_tls_with_the_other_problems() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    issue(dir.path(), "cluster")?;
    issue(dir.path(), "other")?;
    let cluster = |tls: &str, extra: &str| {
        format!(
            "[cluster]\nredis_url = \"redis://127.0.0.1:6379/0\"\nsecret_env = \"PEER_TLS_TEST_UNSET_SECRET\"\n\
             {extra}peer_tls = {{ {tls} }}\n"
        )
    };
    let files = |cert: &str, key: &str, ca: &str| {
        format!("cert_file = {}, key_file = {}, ca_file = {}", toml_str(cert), toml_str(key), toml_str(ca))
    };
    let cases = [
        (
            files("missing.pem", "missing.key", "cluster-ca.pem"),
            "",
            vec![("cluster.peer_tls.cert_file", "cannot be read"), ("cluster.peer_tls.key_file", "cannot be read")],
        ),
        (
            files("other.pem", "other.key", "cluster-ca.pem"),
            "",
            vec![("cluster.peer_tls.cert_file", "the CA of `ca_file` does not verify it")],
        ),
        (
            files("cluster.pem", "other.key", "cluster-ca.pem"),
            "",
            vec![("cluster.peer_tls.cert_file", "`key_file` is not this certificate's key")],
        ),
        (
            files("cluster.pem", "cluster.key", "cluster.key"),
            "",
            vec![("cluster.peer_tls.ca_file", "holds no certificate")],
        ),
        (
            "cert_file = \"cluster.pem\"".to_string(),
            "",
            vec![("cluster.peer_tls.key_file", "missing"), ("cluster.peer_tls.ca_file", "missing")],
        ),
        (
            files("cluster.pem", "cluster.key", "cluster-ca.pem"),
            "advertise_url = \"http://127.0.0.1:8080\"\n",
            vec![("cluster.advertise_url", "https://")],
        ),
        (files("cluster.pem", "cluster.key", "cluster-ca.pem"), "advertise_url = \"https://127.0.0.1:8080\"\n", vec![]),
    ];
    for (tls, extra, expected) in cases {
        let config = write_config(dir.path(), &cluster(&tls, extra))?;
        let output = run(&["check", "--config", config.to_str().unwrap()], None).await?;
        assert_eq!(output.status.code(), Some(EXIT_CONFIG), "{tls}: {}", stdout(&output));
        let text = stdout(&output);
        let mut expected = expected;
        expected.push(("cluster.secret_env", "is not set"));
        for (place, what) in &expected {
            assert!(text.lines().any(|l| l.contains(place) && l.contains(what)), "{tls}: `{place}` {what} in:\n{text}");
        }
        let problems = if expected.len() == 1 {
            "1 configuration problem".to_string()
        } else {
            format!("{} configuration problems", expected.len())
        };
        assert!(text.contains(&problems), "{tls}: {problems} in:\n{text}");
        assert!(!text.contains("PRIVATE KEY"), "{tls}: a key in:\n{text}");
    }
    Ok(())
}
