//! The shared record of `tools/call`s in a real Redis
//! (`IdempotencyLedger` on `RedisStore`), at its bounds: a session keeps
//! at most so many calls and so many bytes of answers, the answers
//! recorded longest ago making room and a running call never; an answer
//! that cannot fit is recorded as too large; every session's answers
//! together are bounded too; a session removed takes its calls with it.

use protocol_droid::adapters::secondary::redis::{RedisOptions, RedisStore};
use protocol_droid::application::server::{
    CallRecord, IdempotencyLedger as _, SessionStore as _, SharedAdmission,
};
use protocol_droid_test_support::TestError;
use protocol_droid_test_support::redis::RedisServer;

const LEASE_MS: u64 = 60_000;
const TOO_LARGE: &str = r#"{"error":{"code":-32603,"message":"too large to keep"}}"#;

fn digest(id: &str) -> [u8; 32] {
    let mut digest = [0_u8; 32];
    for (slot, byte) in digest.iter_mut().zip(id.bytes()) {
        *slot = byte;
    }
    digest
}

/// Admits call `id` of `session` (at most `per_session` calls kept).
async fn admit(
    store: &RedisStore,
    session: &str,
    id: &str,
    per_session: usize,
) -> Result<SharedAdmission, TestError> {
    Ok(store
        .admit(session, id, digest(id), "token", LEASE_MS, per_session)
        .await?)
}

/// Records `outcome` as call `id`'s answer, the session keeping at most
/// `session_bytes` of answers (and every session together as many as
/// they like).
async fn record(
    store: &RedisStore,
    session: &str,
    id: &str,
    outcome: &str,
    session_bytes: usize,
) -> Result<bool, TestError> {
    record_within(store, session, id, outcome, session_bytes, usize::MAX).await
}

/// [`record`], every session's answers together kept within `bytes_in_all`.
async fn record_within(
    store: &RedisStore,
    session: &str,
    id: &str,
    outcome: &str,
    session_bytes: usize,
    bytes_in_all: usize,
) -> Result<bool, TestError> {
    Ok(store
        .record(CallRecord {
            session,
            id,
            digest: digest(id),
            token: "token",
            outcome,
            too_large: TOO_LARGE,
            ttl_ms: LEASE_MS,
            session_bytes,
            bytes_in_all,
            answers_in_all: 4096,
        })
        .await?)
}

/// The sum of the sizes kept under `key`, as the scripts keep it.
async fn bytes_kept(redis: &RedisServer, key: &str) -> Result<i64, TestError> {
    let client = redis::Client::open(redis.url())?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let total: Option<i64> = redis::cmd("HGET")
        .arg(key)
        .arg("#bytes")
        .query_async(&mut connection)
        .await?;
    Ok(total.unwrap_or(0))
}

fn answer(n: usize) -> String {
    format!(r#"{{"result":{{"n":{n},"pad":"{}"}}}}"#, "x".repeat(80))
}

#[tokio::test]
async fn the_oldest_answers_make_room_and_running_calls_are_kept() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let store = RedisStore::connect(&redis.url(), RedisOptions::default()).await?;
    // Four calls at most: "running" is admitted first and never answered.
    assert_eq!(
        admit(&store, "s", "running", 4).await?,
        SharedAdmission::Fresh
    );
    for n in 1..=5 {
        let id = format!("call{n}");
        assert_eq!(admit(&store, "s", &id, 4).await?, SharedAdmission::Fresh);
        assert!(record(&store, "s", &id, &answer(n), usize::MAX).await?);
    }
    // Calls 1 and 2 made room for 4 and 5; the running call is still held
    // (a duplicate under another admission is refused as in flight).
    assert_eq!(
        store
            .admit("s", "running", digest("running"), "another", LEASE_MS, 4)
            .await?,
        SharedAdmission::InFlight
    );
    assert_eq!(
        admit(&store, "s", "call1", 4).await?,
        SharedAdmission::Fresh,
        "forgotten"
    );
    assert_eq!(
        admit(&store, "s", "call5", 4).await?,
        SharedAdmission::Replay(answer(5)),
        "kept"
    );
    // Another session is not touched by this one's bound.
    assert_eq!(
        admit(&store, "t", "call1", 4).await?,
        SharedAdmission::Fresh
    );
    Ok(())
}

#[tokio::test]
async fn the_bytes_of_answers_are_bounded_per_session() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let store = RedisStore::connect(&redis.url(), RedisOptions::default()).await?;
    let size = answer(1).len();
    // Room for two answers.
    let bytes = size * 2 + size / 2;
    for n in 1..=3 {
        let id = format!("call{n}");
        assert_eq!(admit(&store, "s", &id, 256).await?, SharedAdmission::Fresh);
        assert!(record(&store, "s", &id, &answer(n), bytes).await?);
    }
    assert_eq!(
        admit(&store, "s", "call1", 256).await?,
        SharedAdmission::Fresh
    );
    for n in 2..=3 {
        assert_eq!(
            admit(&store, "s", &format!("call{n}"), 256).await?,
            SharedAdmission::Replay(answer(n))
        );
    }
    // An answer larger than the session may keep is recorded as too large:
    // its retry runs nothing either.
    let huge = format!(r#"{{"result":"{}"}}"#, "y".repeat(bytes));
    assert_eq!(
        admit(&store, "s", "huge", 256).await?,
        SharedAdmission::Fresh
    );
    assert!(record(&store, "s", "huge", &huge, bytes).await?);
    assert_eq!(
        admit(&store, "s", "huge", 256).await?,
        SharedAdmission::Replay(TOO_LARGE.to_owned())
    );
    // Only as much was forgotten as the placeholder needed: the newest
    // answer is still kept.
    assert_eq!(
        admit(&store, "s", "call3", 256).await?,
        SharedAdmission::Replay(answer(3))
    );
    Ok(())
}

#[tokio::test]
async fn a_sum_of_sizes_gone_astray_is_counted_afresh() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let store = RedisStore::connect(&redis.url(), RedisOptions::default()).await?;
    let size = answer(1).len();
    let bytes = size * 3;
    assert_eq!(
        admit(&store, "s", "call1", 256).await?,
        SharedAdmission::Fresh
    );
    assert!(record(&store, "s", "call1", &answer(1), bytes).await?);
    // The sum drifts far above the sizes (as an older instance's writes, or
    // an eviction, could leave it).
    let client = redis::Client::open(redis.url())?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let _set: i64 = redis::cmd("HSET")
        .arg("droid:callsizes:s")
        .arg("#bytes")
        .arg(1_000_000)
        .query_async(&mut connection)
        .await?;
    // Room is made, the sum counted afresh once nothing is left to forget,
    // and the answer recorded.
    assert_eq!(
        admit(&store, "s", "call2", 256).await?,
        SharedAdmission::Fresh
    );
    assert!(record(&store, "s", "call2", &answer(2), bytes).await?);
    assert_eq!(
        admit(&store, "s", "call2", 256).await?,
        SharedAdmission::Replay(answer(2))
    );
    let total: i64 = redis::cmd("HGET")
        .arg("droid:callsizes:s")
        .arg("#bytes")
        .query_async(&mut connection)
        .await?;
    assert_eq!(usize::try_from(total)?, answer(2).len());
    Ok(())
}

/// A client opening sessions without end (or ending each and opening
/// another) gets a fresh allowance of answers with each: every session's
/// answers together are bounded as well, those recorded longest ago,
/// whichever session's, making room, and leaving that session's own count.
#[tokio::test]
async fn every_sessions_answers_together_are_bounded() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let store = RedisStore::connect(&redis.url(), RedisOptions::default()).await?;
    let size = answer(1).len();
    // Room for two answers in all; each session may keep far more.
    let in_all = size * 2 + size / 2;
    for n in 1..=3 {
        let session = format!("s{n}");
        assert_eq!(
            admit(&store, &session, "call", 256).await?,
            SharedAdmission::Fresh
        );
        assert!(record_within(&store, &session, "call", &answer(n), usize::MAX, in_all).await?);
    }
    // The first session's answer made room, and left that session's own
    // count and index; the other two are replayed.
    assert_eq!(bytes_kept(&redis, "droid:callsizes:s1").await?, 0);
    let client = redis::Client::open(redis.url())?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let indexed: usize = redis::cmd("ZCARD")
        .arg("droid:calls:s1")
        .query_async(&mut connection)
        .await?;
    assert_eq!(indexed, 0);
    assert_eq!(
        admit(&store, "s1", "call", 256).await?,
        SharedAdmission::Fresh
    );
    for n in 2..=3 {
        assert_eq!(
            admit(&store, &format!("s{n}"), "call", 256).await?,
            SharedAdmission::Replay(answer(n))
        );
    }
    assert_eq!(
        bytes_kept(&redis, "droid:answersizes").await?,
        i64::try_from(size * 2)?
    );
    Ok(())
}

/// A session removed (its client's `DELETE`) takes its calls' records and
/// their answers with it, from its own count and from every session's.
#[tokio::test]
async fn a_removed_session_takes_its_calls_with_it() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let store = RedisStore::connect(&redis.url(), RedisOptions::default()).await?;
    for n in 1..=3 {
        let id = format!("call{n}");
        assert_eq!(
            admit(&store, "gone", &id, 256).await?,
            SharedAdmission::Fresh
        );
        assert!(record(&store, "gone", &id, &answer(n), usize::MAX).await?);
    }
    assert_eq!(
        admit(&store, "kept", "call1", 256).await?,
        SharedAdmission::Fresh
    );
    assert!(record(&store, "kept", "call1", &answer(1), usize::MAX).await?);
    let _removed = store.remove("gone").await?;
    let client = redis::Client::open(redis.url())?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("droid:call*:gone*")
        .query_async(&mut connection)
        .await?;
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(
        bytes_kept(&redis, "droid:answersizes").await?,
        i64::try_from(answer(1).len())?
    );
    assert_eq!(
        admit(&store, "kept", "call1", 256).await?,
        SharedAdmission::Replay(answer(1))
    );
    Ok(())
}

/// Sizes whose list Redis evicted (under `maxmemory`, say) are forgotten
/// when the sum in all is counted afresh: they do not hold the room for
/// ever, refusing every session's answers.
#[tokio::test]
async fn sizes_whose_list_was_evicted_hold_no_room() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let store = RedisStore::connect(&redis.url(), RedisOptions::default()).await?;
    let size = answer(1).len();
    let in_all = size * 2 + size / 2;
    for n in 1..=2 {
        let session = format!("s{n}");
        assert_eq!(
            admit(&store, &session, "call", 256).await?,
            SharedAdmission::Fresh
        );
        assert!(record_within(&store, &session, "call", &answer(n), usize::MAX, in_all).await?);
    }
    let client = redis::Client::open(redis.url())?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let _evicted: i64 = redis::cmd("DEL")
        .arg("droid:answers")
        .query_async(&mut connection)
        .await?;
    assert_eq!(
        admit(&store, "s3", "call", 256).await?,
        SharedAdmission::Fresh
    );
    assert!(record_within(&store, "s3", "call", &answer(3), usize::MAX, in_all).await?);
    assert_eq!(
        admit(&store, "s3", "call", 256).await?,
        SharedAdmission::Replay(answer(3))
    );
    assert_eq!(
        bytes_kept(&redis, "droid:answersizes").await?,
        i64::try_from(size)?
    );
    Ok(())
}
