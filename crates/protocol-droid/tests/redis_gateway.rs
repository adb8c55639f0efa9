//! What a gateway's instances share, in a real Redis (`GatewayStore` on
//! `RedisStore`): a first use is claimed once; of two writes of one record
//! the newer is kept, whichever lands last; a lapsed record is forgotten,
//! and a record renewed, only if nobody wrote it anew meanwhile; one
//! principal's record is read alone.

use protocol_droid::adapters::secondary::redis::{RedisOptions, RedisStore};
use protocol_droid::application::gateway::GatewayStore as _;
use protocol_droid_test_support::TestError;
use protocol_droid_test_support::redis::RedisServer;

async fn store(redis: &RedisServer) -> Result<RedisStore, TestError> {
    Ok(RedisStore::connect(&redis.url(), RedisOptions::default()).await?)
}

#[tokio::test]
async fn the_first_claim_of_an_upstream_is_every_instances() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let (one, two) = (store(&redis).await?, store(&redis).await?);
    assert_eq!(one.first_use("fs").await?, None);
    assert_eq!(one.claim_first_use("fs", "first").await?, "first");
    assert_eq!(two.claim_first_use("fs", "second").await?, "first");
    assert_eq!(two.first_use("fs").await?.as_deref(), Some("first"));
    Ok(())
}

#[tokio::test]
async fn the_newer_record_is_kept_whichever_lands_last() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let store = store(&redis).await?;
    assert!(store.keep_activations("alice", "newer", 200).await?);
    assert!(!store.keep_activations("alice", "older", 100).await?);
    assert!(store.record_approval("fs/read", "newer", 20).await?);
    assert!(!store.record_approval("fs/read", "older", 10).await?);
    let kept = store.activations().await?;
    assert_eq!(kept.len(), 1);
    assert_eq!(
        kept.first()
            .map(|r| (r.name.as_str(), r.text.as_str(), r.version)),
        Some(("alice", "newer", 200))
    );
    let approvals = store.approvals().await?;
    let read = approvals.iter().find(|r| r.name == "fs/read");
    assert_eq!(
        read.map(|r| (r.text.as_str(), r.version)),
        Some(("newer", 20))
    );
    // Forgotten at the version it lapsed at; one written anew stays.
    assert!(store.keep_activations("bob", "lapsed", 50).await?);
    store
        .forget_activations(&[("alice".to_owned(), 100), ("bob".to_owned(), 50)])
        .await?;
    let names: Vec<String> = store
        .activations()
        .await?
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["alice"]);
    Ok(())
}

#[tokio::test]
async fn a_record_is_renewed_only_at_the_version_read() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let (one, two) = (store(&redis).await?, store(&redis).await?);
    assert!(one.keep_activations("session", "set", 100).await?);
    // Renewed at the version it was read at: the same set, lasting longer.
    assert!(one.renew_activations("session", "set", 100, 150).await?);
    // Written anew by another instance meanwhile: a renewal of what was
    // read before does not undo it.
    assert!(two.keep_activations("session", "changed", 200).await?);
    assert!(!one.renew_activations("session", "set", 150, 250).await?);
    let kept = one.activations().await?;
    assert_eq!(
        kept.first()
            .map(|r| (r.name.as_str(), r.text.as_str(), r.version)),
        Some(("session", "changed", 200))
    );
    // Nothing kept: nothing renewed.
    assert!(!one.renew_activations("nobody", "set", 0, 50).await?);
    Ok(())
}

#[tokio::test]
async fn one_principals_record_is_read_alone_as_last_kept() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let (one, two) = (store(&redis).await?, store(&redis).await?);
    assert_eq!(two.activations_of("alice").await?, None);
    assert!(one.keep_activations("alice", "first", 100).await?);
    assert!(one.keep_activations("bob", "bob's", 100).await?);
    assert_eq!(two.activations_of("alice").await?.as_deref(), Some("first"));
    assert!(one.keep_activations("alice", "second", 200).await?);
    assert_eq!(
        two.activations_of("alice").await?.as_deref(),
        Some("second")
    );
    one.forget_activations(&[("alice".to_owned(), 200)]).await?;
    assert_eq!(two.activations_of("alice").await?, None);
    assert_eq!(two.activations_of("bob").await?.as_deref(), Some("bob's"));
    Ok(())
}
