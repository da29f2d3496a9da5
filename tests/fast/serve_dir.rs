//! The folder server through a real rmcp client over `tokio::io::duplex` (`support::folder`), in
//! both protocol eras: listing, reading, the template, refusals, and notifications from file
//! changes. (Reads over the encoded-size cap and a directory over the entry cap: the scale tier.)

use std::path::PathBuf;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mcp_resource_proxy::serve_dir::UriBase;
use rmcp::ServiceError;
use rmcp::model::{ResourceContents, ServerNotification, SubscribeRequestParams, SubscriptionFilter};
use tokio::time::timeout;

use crate::support::folder::*;

#[tokio::test]
async fn lists_every_regular_file_with_name_mime_and_size() {
    let fixture = Fixture::new();
    for era in ERAS {
        let (client, _rx) = connect(fixture.server(), era).await;
        let resources = client.peer().list_all_resources().await.unwrap();
        let seen: Vec<_> =
            resources.iter().map(|r| (r.uri.clone(), r.name.as_str(), r.mime_type.as_deref(), r.size)).collect();
        let expected = vec![
            (fixture.uri("data.bin"), "data.bin", Some("application/octet-stream"), Some(3)),
            (fixture.uri("notes.md"), "notes.md", Some("text/markdown"), Some(8)),
            (fixture.uri("sub%20dir/deeper/x.json"), "sub dir/deeper/x.json", Some("application/json"), Some(2)),
            (fixture.uri("sub%20dir/inner.txt"), "sub dir/inner.txt", Some("text/plain"), Some(5)),
        ];
        assert_eq!(seen, expected, "{era:?}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn reads_text_blobs_and_directories() {
    let fixture = Fixture::new();
    for era in ERAS {
        let (client, _rx) = connect(fixture.server(), era).await;
        let notes = read(&client, &fixture.uri("notes.md")).await.unwrap();
        assert_eq!(text_of(&notes[0]), (fixture.uri("notes.md").as_str(), Some("text/markdown"), "# Notes\n"));

        let data = read(&client, &fixture.uri("data.bin")).await.unwrap();
        let ResourceContents::BlobResourceContents { blob, mime_type, .. } = &data[0] else {
            panic!("expected a blob, got {data:?}");
        };
        assert_eq!(STANDARD.decode(blob).unwrap(), [0xff, 0x00, 0xfe]);
        assert_eq!(mime_type.as_deref(), Some("application/octet-stream"));

        let folder = read(&client, &fixture.uri("sub%20dir")).await.unwrap();
        assert_eq!(folder.len(), 2, "{era:?}: {folder:?}");
        assert_eq!(text_of(&folder[0]), (fixture.uri("sub%20dir/deeper").as_str(), Some("inode/directory"), ""));
        assert_eq!(text_of(&folder[1]), (fixture.uri("sub%20dir/inner.txt").as_str(), Some("text/plain"), "inner"));
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn offers_one_template_over_the_folder() {
    let absolute = Fixture::with_base(UriBase::Absolute);
    assert_eq!(absolute.server().root_uri(), format!("file://{}", absolute.served.display()));
    let fixture = Fixture::new();
    let server = fixture.server();
    assert_eq!(server.root_uri(), "file://", "no host path is published");
    let (client, _rx) = connect(server.clone(), Era::Legacy).await;
    let templates = client.peer().list_all_resource_templates().await.unwrap();
    assert_eq!(templates.len(), 1);
    assert_eq!(templates[0].uri_template, format!("{}/{{+path}}", server.root_uri()));
    assert_eq!(templates[0].name, "file");
    let info = client.peer().peer_info().unwrap();
    let resources = info.capabilities.resources.as_ref().unwrap();
    assert_eq!((resources.subscribe, resources.list_changed), (Some(true), Some(true)));
    client.cancel().await.unwrap();
}

/// By default files are named relative to the folder: no host path is published, and the
/// names read back. With `UriBase::Absolute` they carry the folder's absolute path.
#[tokio::test]
async fn files_are_named_relative_to_the_folder_unless_absolute_is_asked() {
    for (base, notes) in [(UriBase::Relative, "file:///notes.md".to_string()), (UriBase::Absolute, String::new())] {
        let fixture = Fixture::with_base(base);
        let notes = if notes.is_empty() { format!("file://{}/notes.md", fixture.served.display()) } else { notes };
        let (client, _rx) = connect(fixture.server(), Era::Legacy).await;
        let listed = client.peer().list_all_resources().await.unwrap();
        let uris: Vec<&str> = listed.iter().map(|r| r.uri.as_str()).collect();
        assert!(uris.contains(&notes.as_str()), "{base:?}: {uris:?}");
        assert!(uris.contains(&fixture.uri("sub%20dir/deeper/x.json").as_str()), "{base:?}: {uris:?}");
        let published = uris.iter().any(|u| u.contains(&fixture.served.display().to_string()));
        assert_eq!(published, base == UriBase::Absolute, "{base:?}: {uris:?}");
        assert!(read(&client, &notes).await.is_ok(), "{base:?}: {notes} reads back");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn refuses_everything_outside_the_folder_as_not_found() {
    for base in [UriBase::Relative, UriBase::Absolute] {
        refuses_everything_outside(Fixture::with_base(base)).await;
    }
}

async fn refuses_everything_outside(fixture: Fixture) {
    std::os::unix::fs::symlink(fixture.outer.join("outside.txt"), fixture.served.join("escape")).unwrap();
    std::os::unix::fs::symlink("notes.md", fixture.served.join("inner-link.md")).unwrap();
    std::os::unix::fs::symlink("sub dir", fixture.served.join("linked dir")).unwrap();
    let root = fixture.uri("");
    let root = root.trim_end_matches('/');
    let outer = fixture.outer.display().to_string();
    let refused = [
        format!("{root}/../outside.txt"),
        format!("{root}/%2e%2e/outside.txt"),
        format!("{root}/%2E%2E%2Foutside.txt"),
        format!("{root}/sub%20dir%2Finner.txt"),
        format!("{root}/escape"),
        format!("{root}/inner-link.md"),
        format!("{root}/linked%20dir/inner.txt"),
        format!("file://{outer}/outside.txt"),
        format!("{root}/missing.txt"),
        format!("{root}/notes.md?raw=1"),
        format!("{root}/notes.md#top"),
        format!("file://example.com{}/notes.md", fixture.served.display()),
        format!("{root}/notes%0A.md"),
    ];
    for era in ERAS {
        let (client, _rx) = connect(fixture.server(), era).await;
        let expected = match era {
            Era::Legacy => NOT_FOUND_LEGACY,
            Era::Modern => NOT_FOUND_MODERN,
        };
        for uri in &refused {
            let (code, message) = error_code(read(&client, uri).await);
            assert_eq!(code, expected, "{era:?} {uri}");
            assert!(!message.contains(&outer), "{era:?} {uri}: {message}");
        }
        let listed = client.peer().list_all_resources().await.unwrap();
        assert!(listed.iter().all(|r| !r.uri.contains("escape") && !r.uri.contains("link")), "links are not listed");
        let whole = read(&client, &fixture.uri("")).await.unwrap();
        assert!(!format!("{whole:?}").contains("secret"), "{era:?}: a directory read followed a symlink out");
        assert!(!format!("{whole:?}").contains("link"), "{era:?}: a directory read carried a link");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn refuses_reads_over_the_size_cap() {
    let fixture = Fixture::new();
    let big = std::fs::File::create(fixture.served.join("big.bin")).unwrap();
    big.set_len(16 * 1024 * 1024 + 1).unwrap();
    let (client, _rx) = connect(fixture.server(), Era::Legacy).await;
    let (code, message) = error_code(read(&client, &fixture.uri("big.bin")).await);
    assert_eq!(code, -32600);
    assert!(message.contains("too large"), "{message}");
    client.cancel().await.unwrap();
}

/// A name that is not UTF-8 is listed and read under its percent-encoded URI; a tree deeper
/// than the listing goes (64 directories) is listed down to that depth and still readable.
#[tokio::test]
async fn odd_names_and_deep_trees_stay_bounded_and_readable() {
    use std::os::unix::ffi::OsStrExt;
    let fixture = Fixture::new();
    std::fs::write(fixture.served.join(std::ffi::OsStr::from_bytes(b"odd-\xff.txt")), "odd").unwrap();
    let deep: PathBuf = (0..70).map(|i| format!("d{i}")).collect();
    std::fs::create_dir_all(fixture.served.join(&deep)).unwrap();
    std::fs::write(fixture.served.join(&deep).join("bottom.txt"), "bottom").unwrap();
    std::fs::write(fixture.served.join("d0/top.txt"), "top").unwrap();
    let (client, _rx) = connect(fixture.server(), Era::Legacy).await;
    let listed = client.peer().list_all_resources().await.unwrap();
    let uris: Vec<&str> = listed.iter().map(|r| r.uri.as_str()).collect();
    assert!(uris.contains(&fixture.uri("odd-%FF.txt").as_str()), "{uris:?}");
    assert!(uris.contains(&fixture.uri("d0/top.txt").as_str()), "{uris:?}");
    assert!(uris.iter().all(|uri| !uri.ends_with("bottom.txt")), "listing stops at depth 64");
    let odd = read(&client, &fixture.uri("odd-%FF.txt")).await.unwrap();
    assert_eq!(text_of(&odd[0]).2, "odd");
    let deep_uri = fixture.uri(&format!("{}/bottom.txt", deep.display()));
    assert_eq!(text_of(&read(&client, &deep_uri).await.unwrap()[0]).2, "bottom", "a deep file still reads");
    client.cancel().await.unwrap();
}

#[tokio::test]
#[allow(deprecated)]
async fn legacy_subscriber_hears_updates_for_the_file_and_under_a_directory() {
    let fixture = Fixture::new();
    let (client, mut rx) = connect(fixture.server(), Era::Legacy).await;
    let notes = fixture.uri("notes.md");
    client.peer().subscribe(SubscribeRequestParams::new(notes.clone())).await.unwrap();
    client.peer().subscribe(SubscribeRequestParams::new(fixture.uri("sub%20dir"))).await.unwrap();

    std::fs::write(fixture.served.join("notes.md"), "# Changed\n").unwrap();
    hear(&mut rx, Heard::Updated(notes.clone())).await;

    std::fs::write(fixture.served.join("sub dir/inner.txt"), "changed").unwrap();
    hear(&mut rx, Heard::Updated(fixture.uri("sub%20dir/inner.txt"))).await;

    let contents = read(&client, &notes).await.unwrap();
    assert_eq!(text_of(&contents[0]).2, "# Changed\n");
    client.cancel().await.unwrap();
}

#[tokio::test]
#[allow(deprecated)]
async fn legacy_subscribe_outside_the_folder_is_not_found() {
    let fixture = Fixture::new();
    let (client, _rx) = connect(fixture.server(), Era::Legacy).await;
    let outside = fixture.uri("../outside.txt");
    let Err(ServiceError::McpError(e)) = client.peer().subscribe(SubscribeRequestParams::new(outside)).await else {
        panic!("subscribe outside the folder must fail");
    };
    assert_eq!(e.code.0, NOT_FOUND_LEGACY);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn legacy_session_hears_list_changed_and_the_next_list_has_the_file() {
    let fixture = Fixture::new();
    let (client, mut rx) = connect(fixture.server(), Era::Legacy).await;
    let before = client.peer().list_all_resources().await.unwrap();
    assert_eq!(before.len(), 4);

    std::fs::write(fixture.served.join("new.txt"), "new").unwrap();
    hear(&mut rx, Heard::ListChanged).await;

    let after = client.peer().list_all_resources().await.unwrap();
    assert!(after.iter().any(|r| r.uri == fixture.uri("new.txt")), "{after:?}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn listen_stream_hears_updates_and_list_changes() {
    let fixture = Fixture::new();
    let (client, _rx) = connect(fixture.server(), Era::Modern).await;
    let notes = fixture.uri("notes.md");
    let outside = fixture.uri("../outside.txt");
    let filter =
        SubscriptionFilter::builder().resources_list_changed().resource_subscriptions([notes.clone(), outside]).build();
    let mut subscription = client.peer().listen(filter).await.unwrap();
    let accepted = subscription.acknowledged();
    assert_eq!(accepted.resource_subscriptions, Some(vec![notes.clone()]));
    assert_eq!(accepted.resources_list_changed, Some(true));

    std::fs::write(fixture.served.join("notes.md"), "# Changed\n").unwrap();
    let heard = timeout(WAIT, subscription.next()).await.expect("timed out").unwrap();
    let Some(ServerNotification::ResourceUpdatedNotification(updated)) = heard else {
        panic!("expected updated, got {heard:?}");
    };
    assert_eq!(updated.params.uri, notes);

    std::fs::write(fixture.served.join("new.txt"), "new").unwrap();
    let heard = timeout(WAIT, subscription.next()).await.expect("timed out").unwrap();
    assert!(matches!(heard, Some(ServerNotification::ResourceListChangedNotification(_))), "{heard:?}");
    client.cancel().await.unwrap();
}
