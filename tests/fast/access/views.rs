//! What a principal may list and read, and what errors, cursors and cache hits reveal.

use crate::support::fixture::{self, Era, HttpFixture, connect_http_with_token, stats};
use crate::support::proxy::{ProxyProcess, http_upstream};
use rmcp::model::{
    PaginatedRequestParams, ReadResourceRequestParams, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams,
};
use serde_json::Value;

use super::*;

/// Each principal's `resources/list` (every page) and `resources/templates/list` hold exactly
/// what its policy allows, over HTTP in both eras and over stdio.
#[tokio::test]
async fn each_principal_lists_only_its_own_resources_and_templates() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let alice_resources = fixture_resources("alpha", 0..6);
    let alice_templates = fixture_templates("alpha", &["item", "echo", "sized"]);
    let mut bob_resources = fixture_resources("beta", 0..3);
    bob_resources.extend(fixture_resources("alpha", 1..6));
    bob_resources.remove("alpha+fx://fx/blob");
    let mut bob_templates = fixture_templates("beta", &["item", "echo", "sized"]);
    bob_templates.extend(fixture_templates("alpha", &["item"]));
    for era in [Era::Legacy, Era::Modern] {
        let (alice, _) = world.http("alice", era).await?;
        let (resources, pages, templates) = listed(&alice).await?;
        assert_eq!(resources, alice_resources, "alice's list ({era:?})");
        assert!(pages > 1, "alice's list is paged ({pages} pages)");
        assert_eq!(templates, alice_templates, "alice's templates ({era:?})");

        let (bob, _) = world.http("bob", era).await?;
        let (resources, pages, templates) = listed(&bob).await?;
        assert_eq!(resources, bob_resources, "bob's list ({era:?})");
        assert!(pages > 1, "bob's list is paged ({pages} pages)");
        assert_eq!(templates, bob_templates, "bob's templates ({era:?})");
    }
    let (carol, _) = world.carol(Era::Legacy).await?;
    let (resources, _, templates) = listed(&carol).await?;
    assert_eq!(resources, set(["beta+fx://fx/multi".to_string()]), "carol's list (stdio)");
    assert_eq!(templates, fixture_templates("beta", &["echo"]), "carol's templates (stdio)");
    Ok(())
}

/// A read of a URI the principal may not see answers exactly like one that does not exist:
/// same code, same message and data but for the URI — in both eras, and over stdio.
#[tokio::test]
async fn a_denied_read_answers_exactly_like_a_missing_uri() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    for (era, code) in [(Era::Legacy, NOT_FOUND_LEGACY), (Era::Modern, NOT_FOUND_MODERN)] {
        let (alice, _) = world.http("alice", era).await?;
        // Positive control: what is allowed reads.
        alice.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/0")).await?;
        let missing = ["alpha+fx://fx/missing", "nowhere+fx://fx/item/1"];
        assert_denied_like_missing(&alice, "beta+fx://fx/item/1", &missing, code).await;

        let (bob, _) = world.http("bob", era).await?;
        bob.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/1")).await?;
        let missing = ["beta+fx://fx/missing", "alpha+fx://fx/item/x", "nowhere+fx://fx/item/0"];
        assert_denied_like_missing(&bob, "alpha+fx://fx/item/0", &missing, code).await;
        assert_denied_like_missing(&bob, "alpha+fx://fx/echo/hello", &missing, code).await;
    }
    let (carol, _) = world.carol(Era::Legacy).await?;
    carol.read_resource(ReadResourceRequestParams::new("beta+fx://fx/multi")).await?;
    assert_denied_like_missing(&carol, "alpha+fx://fx/item/1", &["nowhere+fx://fx/item/1"], NOT_FOUND_LEGACY).await;
    assert_denied_like_missing(&carol, "beta+fx://fx/item/1", &["nowhere+fx://fx/item/1"], NOT_FOUND_LEGACY).await;
    Ok(())
}

/// A legacy subscribe to a denied URI gets the not-found answer of an unknown one; a 2026
/// listen on [denied, allowed] acknowledges only the allowed URI.
#[tokio::test]
async fn a_denied_uri_is_not_subscribable() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let (bob, _) = world.http("bob", Era::Legacy).await?;
    #[allow(deprecated)]
    bob.subscribe(SubscribeRequestParams::new("alpha+fx://fx/item/1")).await?;
    let denied = error_shape(&subscribe_error(&bob, "alpha+fx://fx/item/0").await, "alpha+fx://fx/item/0");
    let missing = error_shape(&subscribe_error(&bob, "nowhere+fx://fx/item/0").await, "nowhere+fx://fx/item/0");
    assert_eq!(denied.0, NOT_FOUND_LEGACY, "{denied:?}");
    assert_eq!(denied, missing, "a denied subscribe looks like an unknown URI");

    let (carol, _) = world.carol(Era::Legacy).await?;
    let denied = error_shape(&subscribe_error(&carol, "alpha+fx://fx/item/0").await, "alpha+fx://fx/item/0");
    let missing = error_shape(&subscribe_error(&carol, "nowhere+fx://fx/item/0").await, "nowhere+fx://fx/item/0");
    assert_eq!(denied.0, NOT_FOUND_LEGACY, "{denied:?}");
    assert_eq!(denied, missing, "a denied subscribe looks like an unknown URI (stdio)");

    let (bob_modern, _) = world.http("bob", Era::Modern).await?;
    let filter = SubscriptionFilter::builder()
        .resource_subscriptions(["alpha+fx://fx/item/0", "alpha+fx://fx/item/1", "alpha+fx://fx/multi/b"])
        .build();
    let stream = bob_modern.listen(filter).await?;
    assert_eq!(
        stream.acknowledged().resource_subscriptions,
        Some(vec!["alpha+fx://fx/item/1".to_string()]),
        "only the allowed URI is acknowledged"
    );
    Ok(())
}

/// A read the upstream marked `cacheScope: private` is cached for the principal who read it and
/// never served to another: the fixture counts its upstream reads.
#[tokio::test]
async fn a_private_cached_read_is_not_served_across_principals() -> anyhow::Result<()> {
    let vault = HttpFixture::spawn(&["--scope", "private", "--ttl-ms", "60000", "--resources", "1"]).await?;
    let both = "principals = [\"alice\", \"bob\"]\nallow = [\"vault+**\"]\n";
    let policies = policies_folder(&[("vault.toml", both)])?;
    let config = access_config(policies.path(), &http_upstream("vault", &vault.url, ""));
    let proxy = ProxyProcess::start_with(&config, &[], &TOKENS).await?;
    proxy.wait_up("vault", 1).await?;
    let (side, _) = fixture::connect_http(&vault.url, Era::Auto).await?;
    let uri = "vault+fx://fx/item/0";
    let upstream_reads = |stats: &Value| stats["reads_by_uri"]["fx://fx/item/0"].as_u64().unwrap_or(0);

    let (alice, _) = connect_http_with_token(&proxy.url, Era::Modern, ALICE_TOKEN).await?;
    for _ in 0..2 {
        alice.read_resource(ReadResourceRequestParams::new(uri)).await?;
    }
    assert_eq!(upstream_reads(&stats(&side).await?), 1, "alice's second read is a cache hit");

    let (bob, _) = connect_http_with_token(&proxy.url, Era::Modern, BOB_TOKEN).await?;
    let read = bob.read_resource(ReadResourceRequestParams::new(uri)).await?;
    assert!(!read.contents.is_empty());
    assert_eq!(upstream_reads(&stats(&side).await?), 2, "bob is not served alice's private entry");
    Ok(())
}

/// A read of a resource the principal may see must not carry contents it may not see: reading
/// the folder `app/` (which holds `.env` and `secrets/`, denied by the default policy), and bob
/// reading alpha's `multi`, whose contents are `multi/a`, `multi/b` (denied to him) and `multi/c`.
#[tokio::test]
async fn a_read_does_not_carry_contents_the_principal_may_not_see() -> anyhow::Result<()> {
    let (_folder, root) = corpus_folder()?;
    let (proxy, _policies) = corpus_proxy(&root, DEFAULT_POLICY).await?;
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE_TOKEN).await?;
    let mut leaks = Vec::new();
    for folder in ["app", ""] {
        let uri = format!("docs+file://{}/{folder}", root.display()).trim_end_matches('/').to_string();
        let contents = match alice.read_resource(ReadResourceRequestParams::new(uri.clone())).await {
            Ok(read) => text_of(&read.contents),
            Err(_) => continue, // refusing the whole folder would be fine too
        };
        for (content_uri, text) in &contents {
            let denied = content_uri.ends_with("/.env") || content_uri.contains("/secrets");
            if denied || text.contains("content of app/.env") || text.contains("content of .env") {
                leaks.push(format!("reading {uri} carried {content_uri}: {text:?}"));
            }
        }
    }

    let world = Principals::start().await?;
    let (bob, _) = world.http("bob", Era::Legacy).await?;
    let read = bob.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/multi")).await?;
    let contents = text_of(&read.contents);
    assert!(
        contents.iter().any(|(uri, _)| uri == "alpha+fx://fx/multi/a"),
        "control: allowed parts come: {contents:?}"
    );
    for (content_uri, text) in &contents {
        if content_uri == "alpha+fx://fx/multi/b" {
            leaks.push(format!("bob reading alpha+fx://fx/multi carried {content_uri}: {text:?}"));
        }
    }
    assert!(leaks.is_empty(), "contents the principal may not see:\n{}", leaks.join("\n"));
    Ok(())
}

/// bob's allow `alpha+fx://fx/item/*.md`, in front of an upstream that routes reads on the URL
/// path (so a forwarded `item/0#.md` would read item 0): neither a fragment nor a query makes
/// `item/0` Markdown; a fragment never reaches the upstream (the read of `item/1#top` is a read
/// of `item/1`); alice's deny of `item/2` holds with a query, a fragment or a trailing `/`.
/// The upstream's own counts show what crossed the wire.
#[tokio::test]
async fn a_query_or_fragment_neither_widens_an_allow_nor_goes_upstream() -> anyhow::Result<()> {
    let alpha = HttpFixture::spawn(&["--era", "both", "--resources", "3", "--lenient-uris"]).await?;
    let bob = "principals = [\"bob\"]\nallow = [\"alpha+fx://fx/item/*.md\", \"alpha+fx://fx/item/1\"]\n";
    let alice = "principals = [\"alice\"]\nallow = [\"alpha+**\"]\ndeny = [\"alpha+fx://fx/item/2\"]\n";
    let policies = policies_folder(&[("alice.toml", alice), ("bob.toml", bob)])?;
    let config = access_config(policies.path(), &http_upstream("alpha", &alpha.url, ""));
    let proxy = ProxyProcess::start_with(&config, &[], &TOKENS).await?;
    proxy.wait_up("alpha", 1).await?;
    let (side, _) = fixture::connect_http(&alpha.url, Era::Legacy).await?;
    for (era, code) in [(Era::Legacy, NOT_FOUND_LEGACY), (Era::Modern, NOT_FOUND_MODERN)] {
        let (bob, _) = connect_http_with_token(&proxy.url, era, BOB_TOKEN).await?;
        let read = bob.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/1#top")).await?;
        assert!(text_of(&read.contents)[0].1.starts_with("item 1 v"), "control: {:?}", text_of(&read.contents));
        let missing = ["alpha+fx://fx/item/x.md", "nowhere+fx://fx/item/0.md"];
        for uri in ["alpha+fx://fx/item/0#.md", "alpha+fx://fx/item/0?x=.md", "alpha+fx://fx/item/0?.md"] {
            assert_denied_like_missing(&bob, uri, &missing, code).await;
        }
        assert_denied_like_missing(&bob, "alpha+fx://fx/item/0?x=/y.md", &missing, code).await;

        let (alice, _) = connect_http_with_token(&proxy.url, era, ALICE_TOKEN).await?;
        let read = alice.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/1?a=b")).await?;
        assert!(text_of(&read.contents)[0].1.starts_with("item 1 v"), "control: a query is forwarded");
        for uri in ["alpha+fx://fx/item/2?a=b", "alpha+fx://fx/item/2#x", "alpha+fx://fx/item/2/"] {
            assert_denied_like_missing(&alice, uri, &["alpha+fx://fx/missing"], code).await;
        }
    }
    let stats = stats(&side).await?;
    let reads: Vec<&String> = stats["reads_by_uri"].as_object().map(|m| m.keys().collect()).unwrap_or_default();
    assert!(reads.iter().any(|uri| *uri == "fx://fx/item/1"), "control: item 1 was read upstream: {reads:?}");
    assert!(reads.iter().all(|uri| !uri.contains('#')), "a fragment went upstream: {reads:?}");
    let denied = |uri: &&&String| uri.starts_with("fx://fx/item/0") || uri.starts_with("fx://fx/item/2");
    assert!(!reads.iter().any(|uri| denied(&uri)), "a denied item was read upstream: {reads:?}");
    Ok(())
}

/// A URI over the 8 KiB limit gets invalid-params with a message saying so, in both eras and
/// for subscribe, without the URI echoed back; one at the limit is served.
#[tokio::test]
async fn a_uri_over_the_length_limit_gets_a_clear_error() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let prefix = "alpha+fx://fx/echo/";
    let at_limit = format!("{prefix}{}", "a".repeat(8192 - prefix.len()));
    let over = format!("{at_limit}a");
    for era in [Era::Legacy, Era::Modern] {
        let (alice, _) = world.http("alice", era).await?;
        let read = alice.read_resource(ReadResourceRequestParams::new(at_limit.clone())).await?;
        assert_eq!(text_of(&read.contents)[0].1.len(), 8192 - prefix.len(), "control: at the limit it reads");
        let error = read_error(&alice, &over).await;
        assert_eq!(fixture::error_code(&error), Some(-32602), "{era:?}: {error}");
        let message = error.to_string();
        assert!(message.contains("longer than 8192 bytes"), "{message}");
        assert!(message.len() < 300, "the URI is not echoed back ({} bytes)", message.len());
    }
    let (alice, _) = world.http("alice", Era::Legacy).await?;
    let error = subscribe_error(&alice, &over).await;
    assert!(error.to_string().contains("longer than 8192 bytes"), "{error}");
    Ok(())
}

/// A list cursor minted for alice is refused to bob (it would page through alice's view), a
/// cursor does not reveal its position or the catalog generation, and unsubscribing reveals
/// nothing: a denied URI answers like an unknown one, an allowed one that
/// was never subscribed is a no-op.
#[tokio::test]
async fn cursors_and_unsubscribe_reveal_nothing_across_principals() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let (alice, _) = world.http("alice", Era::Legacy).await?;
    let (bob, _) = world.http("bob", Era::Legacy).await?;
    let cursor = alice.list_resources(None).await?.next_cursor.expect("alice's list has pages");
    let page = |cursor: &str| Some(PaginatedRequestParams::default().with_cursor(Some(cursor.to_string())));
    alice.list_resources(page(&cursor)).await?;
    let error = bob.list_resources(page(&cursor)).await.expect_err("alice's cursor");
    assert_eq!(fixture::error_code(&error), Some(-32602), "{error}");
    assert!(error.to_string().contains("list again"), "{error}");
    // bob's own cursor does not tell him where in the merged list (hidden entries included) his
    // next page starts, nor the catalog generation: both read as noise (a clear one is small).
    let bob_cursor = bob.list_resources(None).await?.next_cursor.expect("bob's list has pages");
    let raw = base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &bob_cursor)?;
    let field = |at: usize| u64::from_be_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
    assert!(raw.len() > 18 && field(2) > u64::from(u32::MAX) && field(10) > u64::from(u32::MAX), "{raw:?}");

    #[allow(deprecated)]
    let unsubscribe = |uri: &str| bob.unsubscribe(UnsubscribeRequestParams::new(uri));
    unsubscribe("alpha+fx://fx/item/3").await?;
    let denied = unsubscribe("alpha+fx://fx/item/0").await.expect_err("denied");
    let unknown = unsubscribe("nowhere+fx://fx/item/0").await.expect_err("unknown");
    assert_eq!(
        error_shape(&denied, "alpha+fx://fx/item/0"),
        error_shape(&unknown, "nowhere+fx://fx/item/0"),
        "a denied unsubscribe looks like an unknown URI"
    );
    Ok(())
}
