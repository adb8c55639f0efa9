//! The relay between instances in a real Redis (`Relay` on `RedisStore`),
//! when the connection its subscription rides on stops carrying anything
//! without closing: a network partition, or a balancer or NAT dropping a
//! quiet flow. The subscription must notice by itself and be opened
//! afresh, or the instance stays deaf to the others while it believes it
//! listens.
//!
//! Between the store and Redis runs a proxy of the test's own that can
//! freeze one connection: it stops moving its bytes either way and keeps
//! it open.

use std::time::Duration;

use protocol_droid::adapters::secondary::redis::{RedisOptions, RedisStore};
use protocol_droid::application::server::Relay as _;
use protocol_droid_test_support::TestError;
use protocol_droid_test_support::proxy::Proxy;
use protocol_droid_test_support::redis::RedisServer;

#[tokio::test]
async fn a_subscription_whose_connection_went_silent_is_opened_afresh() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let target = redis
        .url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let proxy = Proxy::start(target).await?;
    let options = RedisOptions {
        // Short for the test, long enough that a busy machine does not
        // reopen the subscription before it is frozen.
        relay_probe: Duration::from_millis(1500),
        ..RedisOptions::default()
    };
    let store = RedisStore::connect(&format!("redis://{}", proxy.address), options).await?;
    let before = proxy.connections();
    let mut heard = store.listen("a").await?;
    // The subscription rides on the connection `listen` opened.
    assert_eq!(proxy.connections(), before + 1);

    // Heard while the connection carries it.
    let direct = RedisStore::connect(&redis.url(), RedisOptions::default()).await?;
    assert_eq!(direct.send("a", "first").await?, 1);
    let first = tokio::time::timeout(Duration::from_secs(5), heard.recv()).await?;
    assert_eq!(first.as_deref(), Some("first"));

    // Silent from now on, and still open: Redis still counts it as a
    // subscriber, so a sender sees nothing wrong.
    proxy.freeze(before)?;
    let reached = async {
        let mut n = 0_u32;
        loop {
            n += 1;
            let _subscribers = direct.send("a", &format!("later {n}")).await;
            tokio::select! {
                message = heard.recv() => return message,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    };
    let later = tokio::time::timeout(Duration::from_secs(10), reached).await?;
    assert!(
        later.as_deref().is_some_and(|m| m.starts_with("later ")),
        "{later:?}"
    );
    assert!(
        proxy.connections() > before + 1,
        "the subscription was opened again on a new connection"
    );
    Ok(())
}
