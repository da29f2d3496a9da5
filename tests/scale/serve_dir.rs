//! The folder server's size caps at size: a read whose encoded size is over the cap (counted as
//! sent, after base64/escaping), and a directory over its entry cap (10,001 files).

use crate::support::folder::*;
use tokio::time::timeout;

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

/// The cap counts what is sent: a binary file just under 16 MiB is over 21 MiB in base64,
/// and a text of control characters grows sixfold when escaped.
#[tokio::test]
async fn refuses_reads_whose_encoded_size_is_over_the_cap() {
    let fixture = Fixture::new();
    let binary: Vec<u8> = (0..16 * 1024 * 1024 - 1024).map(|i: u32| (i % 251) as u8 | 0x80).collect();
    std::fs::write(fixture.served.join("almost.bin"), binary).unwrap();
    std::fs::write(fixture.served.join("controls.txt"), vec![1u8; 3 * 1024 * 1024]).unwrap();
    std::fs::write(fixture.served.join("fits.bin"), vec![0xffu8; 11 * 1024 * 1024]).unwrap();
    let (client, _rx) = connect(fixture.server(), Era::Legacy).await;
    for name in ["almost.bin", "controls.txt"] {
        let read = timeout(WAIT, read(&client, &fixture.uri(name))).await.expect("an answer, not a dropped reply");
        let (code, message) = error_code(read);
        assert_eq!(code, -32600, "{name}");
        assert!(message.contains("too large"), "{name}: {message}");
    }
    let fits = timeout(WAIT, read(&client, &fixture.uri("fits.bin"))).await.expect("answered").unwrap();
    assert_eq!(fits.len(), 1, "control: 11 MiB of binary fits");
    client.cancel().await.unwrap();
}
