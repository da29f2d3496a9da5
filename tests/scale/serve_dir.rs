//! The folder server refuses a directory read over its entry cap (10,001 files) and reads one at it.

use crate::support::folder::*;

/// A directory over the entry cap is refused clearly rather than answered in part.
#[tokio::test]
async fn refuses_a_directory_read_over_the_entry_cap() {
    let fixture = Fixture::new();
    let crowd = fixture.served.join("crowd");
    std::fs::create_dir(&crowd).unwrap();
    for i in 0..10_001 {
        std::fs::File::create(crowd.join(format!("{i:05}"))).unwrap();
    }
    let (client, _rx) = connect(fixture.server(), Era::Legacy).await;
    let (code, message) = error_code(read(&client, &fixture.uri("crowd")).await);
    assert_eq!(code, -32600);
    assert!(message.contains("too large") && message.contains("10000 entries"), "{message}");
    std::fs::remove_file(crowd.join("10000")).unwrap();
    let contents = read(&client, &fixture.uri("crowd")).await.unwrap();
    assert_eq!(contents.len(), 10_000, "control: at the cap it reads");
    client.cancel().await.unwrap();
}
