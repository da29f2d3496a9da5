//! An HTTPS upstream whose certificate a private CA issued: the rmcp fixture behind a TLS
//! terminator written here (rustls, on 127.0.0.1:0), with a CA and a server certificate made
//! in the test (rcgen). With `ca_file` naming the CA the proxy connects and serves the
//! upstream's resources; without it the upstream stays down and `/status` says why in plain
//! words.

use std::sync::Arc;

use crate::support::fixture::{self, Era, HttpFixture, list_all_resources};
use crate::support::proxy::{ProxyProcess, http_upstream, toml_str};
use anyhow::{Context, bail};
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA (its PEM) and a server certificate for 127.0.0.1 it signed (DER, with its key).
struct Pki {
    ca_pem: String,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: Vec<u8>,
}

fn private_pki() -> anyhow::Result<Pki> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "test private CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let server_key = rcgen::KeyPair::generate()?;
    let server_params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    let server = server_params.signed_by(&server_key, &issuer)?;
    Ok(Pki { ca_pem: ca.pem(), server_chain: vec![server.der().clone()], server_key: server_key.serialize_der() })
}

/// Terminate TLS on 127.0.0.1:0 and pass every connection on to `backend` (host:port).
async fn tls_terminator(pki: &Pki, backend: String) -> anyhow::Result<String> {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.server_key.clone()));
    let config = ServerConfig::builder().with_no_client_auth().with_single_cert(pki.server_chain.clone(), key)?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (acceptor, backend) = (acceptor.clone(), backend.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(client).await else { return };
                let Ok(mut plain) = TcpStream::connect(&backend).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    Ok(format!("https://{address}/mcp"))
}

/// The fixture over plain HTTP, and an HTTPS URL for it behind the terminator.
async fn https_fixture(pki: &Pki) -> anyhow::Result<(HttpFixture, String)> {
    let fixture = HttpFixture::spawn(&["--resources", "2"]).await?;
    let backend = fixture.url.trim_start_matches("http://").split('/').next().context("host:port")?.to_string();
    let url = tls_terminator(pki, backend).await?;
    Ok((fixture, url))
}

#[tokio::test]
async fn an_https_upstream_with_a_private_ca_connects_with_its_ca_file() -> anyhow::Result<()> {
    let pki = private_pki()?;
    let (_fixture, url) = https_fixture(&pki).await?;
    let dir = tempfile::tempdir()?;
    let ca_path = dir.path().join("private-ca.pem");
    std::fs::write(&ca_path, &pki.ca_pem)?;
    let extra = format!("ca_file = {}", toml_str(&ca_path.display().to_string()));
    let proxy = ProxyProcess::start(&http_upstream("secure", &url, &extra)).await?;
    proxy.wait_up("secure", 1).await?;

    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let (listed, _) = list_all_resources(&host).await?;
    assert!(listed.iter().all(|r| r.uri.starts_with("secure+fx://")), "{listed:?}");
    let uri = "secure+fx://fx/item/1";
    assert!(listed.iter().any(|r| r.uri == uri), "{listed:?}");
    let read = host.read_resource(ReadResourceRequestParams::new(uri)).await?;
    let ResourceContents::TextResourceContents { uri: read_uri, .. } = &read.contents[0] else {
        bail!("not text: {read:?}")
    };
    assert_eq!(read_uri, uri);
    Ok(())
}

#[tokio::test]
async fn without_its_ca_file_the_upstream_stays_down_and_status_says_why() -> anyhow::Result<()> {
    let pki = private_pki()?;
    let (_fixture, url) = https_fixture(&pki).await?;
    let config = format!(
        "[server]\nstartup_wait = \"0s\"\n\n{}",
        http_upstream("secure", &url, "required = false\nreconnect_max = \"250ms\"")
    );
    let proxy = ProxyProcess::start(&config).await?;
    let status = proxy.status_when("secure", |s| s["state"] == "down" && s["last_error"].is_string()).await?;
    let reason = status["last_error"].as_str().unwrap_or_default();
    assert!(reason.contains("certificate"), "a plain-words reason naming the certificate: {status}");
    assert!(reason.contains("ca_file"), "the reason points at the fix: {status}");
    assert!(!reason.contains("Error {") && !reason.contains("kind:"), "no Debug dump: {status}");
    Ok(())
}
