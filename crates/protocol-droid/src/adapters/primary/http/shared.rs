//! Streamable HTTP sessions shared between instances (see
//! [`SharedSessions`]): any instance behind a balancer serves any session's
//! request.
//!
//! - `initialize` writes the session's record: who opened it, and the
//!   [`SessionImage`] its connection settled.
//! - `logging/setLevel` and `resources/(un)subscribe` change what is kept
//!   beside the record, each change in one step of the store's, so that two
//!   made at once on two instances both hold.
//! - Every later request reads the session (restarting its idle time): an
//!   instance that does not hold it settles it from the image and the
//!   changes (a replica), one that holds it takes what changed elsewhere
//!   since it last read it, and a session that is gone (ended elsewhere,
//!   or expired) ends here too.
//! - A request this instance sends the client carries the instance's name
//!   in its id; the answer, posted to any instance, is relayed to it.
//!
//! - A call's stream whose reader left is copied to the store as it goes on
//!   (`events`), so a `Last-Event-ID` naming another instance is resumed
//!   from there.
//!
//! - A `tools/call`'s idempotency record is the shared one
//!   ([`Connection::share_as`](crate::application::server::Connection::share_as)).
//!
//! - A 2025-11-25 task's questions reach a `tasks/result` waiting on
//!   another instance, and its status the standing stream another instance
//!   holds (`task_relay`); its record is the shared task store's.
//!
//! What is not shared yet: the standing `GET` stream's own events.
//! HTTP+SSE sessions stay with the instance that opened them.

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::respond::refusal;
use super::sessions::{Session, Sessions, Synced, sessions_full};
use crate::application::server::{
    AuthContext, ChangeKept, ImageChange, KeptChange, KeptSession, Lasting, MAX_SUBSCRIPTIONS,
    Server, SessionImage, SharedSessions, StoreError,
};
use crate::domain::jsonrpc::{
    ErrorCode, ErrorObject, Incoming, Message, Request, RequestId, parse,
};
use crate::domain::{LoggingLevel, TransportKind};

/// The longest instance name an id may carry (what `droid` keeps of one).
const MAX_INSTANCE_NAME: usize = 64;

/// The largest answer relayed to another instance, in bytes: answers to
/// sampling, elicitation and roots requests are small, and every relayed
/// message passes through Redis.
pub(super) const MAX_RELAYED: usize = 1024 * 1024;

/// The largest record kept, in bytes, and the most bytes of subscribed
/// URIs kept beside it: a client's `initialize` params and subscriptions
/// are its to choose, and every request reads them back.
const MAX_RECORD: usize = 64 * 1024;

/// A session's record as the store keeps it: as it was opened, its log
/// level and subscriptions kept beside it.
#[derive(Serialize, Deserialize)]
struct Record {
    owner: Option<String>,
    quota: String,
    image: SessionImage,
}

/// What a request asks to change of what its session keeps after the
/// handshake, read before it runs: only these requests change it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Intent {
    /// `logging/setLevel`.
    Level(LoggingLevel),
    /// `resources/subscribe`.
    Subscribe(String),
    /// `resources/unsubscribe`.
    Unsubscribe(String),
}

/// What `request` asks to change of what its session keeps, if anything
/// (a request whose params do not say is refused as it runs, and shares
/// nothing).
pub(super) fn intent(request: &Request) -> Option<Intent> {
    let params = request.params.as_ref()?;
    let text = |name: &str| params.get(name).and_then(Value::as_str).map(str::to_owned);
    match request.method.as_str() {
        "logging/setLevel" => params
            .get("level")
            .and_then(|level| serde_json::from_value(level.clone()).ok())
            .map(Intent::Level),
        "resources/subscribe" => text("uri").map(Intent::Subscribe),
        "resources/unsubscribe" => text("uri").map(Intent::Unsubscribe),
        _ => None,
    }
}

/// A store out of reach, told as every other: `503` and a retry in a second
/// (perhaps on another instance).
fn unavailable(error: &StoreError) -> Response {
    tracing::warn!(target: "droid", %error, "a shared session could not be read or written");
    let mut response = refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        ErrorCode::STORE_UNAVAILABLE,
        "the shared session store is unavailable; retry",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(1_u32));
    response
}

/// The error a request answers with when its record could not be written.
pub(super) fn unavailable_error() -> ErrorObject {
    ErrorObject::new(
        ErrorCode::STORE_UNAVAILABLE,
        "the shared session store is unavailable; retry",
    )
}

/// Writes a new `session`'s record, if no record has its id yet.
pub(super) async fn create(sessions: &Sessions, session: &Session) -> Result<(), ErrorObject> {
    let Some(shared) = &sessions.shared else {
        return Ok(());
    };
    let Some(mut image) = session.connection().and_then(|c| c.image()) else {
        return Ok(());
    };
    // Kept beside the record, where each change is made on its own
    // (`share_change`, below).
    image.level = None;
    image.subscribed.clear();
    let record = Record {
        owner: session.owner.clone(),
        quota: session.quota.clone(),
        image,
    };
    let text = serde_json::to_string(&record)
        .map_err(|_| ErrorObject::new(ErrorCode::INTERNAL_ERROR, "session unreadable"))?;
    if text.len() > MAX_RECORD {
        return Err(ErrorObject::new(
            ErrorCode::INVALID_PARAMS,
            format!(
                "this session is too large to share (at most {MAX_RECORD} bytes of initialize params)"
            ),
        ));
    }
    match shared
        .store
        .create(&session.id, &text, ttl_ms(sessions))
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            return Err(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                "a session id was minted twice",
            ));
        }
        Err(error) => {
            tracing::warn!(target: "droid", %error, "a shared session could not be written");
            return Err(unavailable_error());
        }
    }
    // A handshake sets neither a level nor a subscription: what this copy
    // holds is the session at version 0, as its Synced says already.
    Ok(())
}

/// Shares what the requests `intents` (answered without error, in order)
/// changed of what `session` keeps, each change made in the store in one
/// step: what another instance changes at the same time is kept too. Only
/// these requests' own changes are written, never what the session's copy
/// took from elsewhere meanwhile, and a subscription is written only if
/// the session kept it.
pub(super) async fn share_change(
    sessions: &Sessions,
    session: &Session,
    intents: &[Intent],
) -> Result<(), ErrorObject> {
    let Some(shared) = &sessions.shared else {
        return Ok(());
    };
    let Some(connection) = session.connection() else {
        return Ok(());
    };
    let Some(after) = connection.lasting() else {
        return Ok(());
    };
    let mut change = ImageChange::default();
    for intent in intents {
        match intent {
            Intent::Level(level) => change.level = Some(*level),
            Intent::Subscribe(uri) => {
                change.unsubscribed.retain(|u| u != uri);
                if after.subscribed.contains(uri) && !change.subscribed.contains(uri) {
                    change.subscribed.push(uri.clone());
                }
            }
            Intent::Unsubscribe(uri) => {
                change.subscribed.retain(|u| u != uri);
                if !change.unsubscribed.contains(uri) {
                    change.unsubscribed.push(uri.clone());
                }
            }
        }
    }
    if change.is_empty() {
        return Ok(());
    }
    let subscribed_bytes: usize = after.subscribed.iter().map(String::len).sum();
    if subscribed_bytes > MAX_RECORD && !change.subscribed.is_empty() {
        // Refused, so not kept here either.
        connection.apply(&ImageChange {
            unsubscribed: change.subscribed,
            ..ImageChange::default()
        });
        return Err(ErrorObject::new(
            ErrorCode::INVALID_PARAMS,
            format!(
                "this session is too large to share (at most {MAX_RECORD} bytes of subscribed URIs)"
            ),
        ));
    }
    let level = change.level.and_then(level_text);
    let kept = KeptChange {
        level: level.as_deref(),
        subscribed: &change.subscribed,
        unsubscribed: &change.unsubscribed,
        max_subscribed: MAX_SUBSCRIPTIONS,
    };
    match shared
        .store
        .change(&session.id, &kept, ttl_ms(sessions))
        .await
    {
        Ok(ChangeKept::Made { version }) => {
            session.fold(&change, version);
            tell_changed(shared, &session.id, false);
            Ok(())
        }
        Ok(ChangeKept::Full { version }) => {
            // Some subscription was not kept: none is kept here, and the
            // next reading takes back those the store did keep.
            session.fold(
                &ImageChange {
                    subscribed: Vec::new(),
                    ..change.clone()
                },
                version,
            );
            connection.apply(&ImageChange {
                unsubscribed: change.subscribed,
                ..ImageChange::default()
            });
            tell_changed(shared, &session.id, false);
            Err(ErrorObject::new(
                ErrorCode::INVALID_PARAMS,
                format!("at most {MAX_SUBSCRIPTIONS} resource subscriptions per session"),
            ))
        }
        // Ended elsewhere meanwhile: this instance lets it go too.
        Ok(ChangeKept::Gone) => {
            sessions.end(&session.id);
            Err(ErrorObject::new(
                ErrorCode::INVALID_REQUEST,
                "unknown or ended session",
            ))
        }
        Err(error) => {
            tracing::warn!(target: "droid", %error, "a shared session could not be written");
            Err(unavailable_error())
        }
    }
}

/// A log level as the store keeps it: as the wire names it.
fn level_text(level: LoggingLevel) -> Option<String> {
    match serde_json::to_value(level) {
        Ok(Value::String(text)) => Some(text),
        _ => None,
    }
}

/// What `kept` says the session's client changed; a level this build does
/// not know is taken as none.
fn lasting_of(kept: &KeptSession) -> Lasting {
    Lasting {
        level: kept
            .level
            .as_ref()
            .and_then(|text| serde_json::from_value(Value::String(text.clone())).ok()),
        subscribed: kept.subscribed.iter().cloned().collect(),
    }
}

fn ttl_ms(sessions: &Sessions) -> u64 {
    u64::try_from(sessions.idle().as_millis()).unwrap_or(u64::MAX)
}

/// The session `id` for `caller`, from this instance or, where sessions
/// are shared, from the store: `Ok(None)` when there is none for them,
/// `Err` with the response to send when the store is out of reach and this
/// instance does not hold the session.
pub(super) async fn find(
    server: &Server,
    sessions: &Sessions,
    id: &str,
    caller: &AuthContext,
) -> Result<Option<Arc<Session>>, Response> {
    let Some(shared) = &sessions.shared else {
        return Ok(sessions.get(id, TransportKind::StreamableHttp, caller));
    };
    let here = sessions.local(id);
    // An HTTP+SSE session is never shared: it is this instance's alone.
    if here
        .as_ref()
        .is_some_and(|s| s.transport != TransportKind::StreamableHttp)
    {
        return Ok(sessions.get(id, TransportKind::StreamableHttp, caller));
    }
    let fetched = match shared.store.fetch(id, ttl_ms(sessions)).await {
        Ok(fetched) => fetched,
        // Held here: served from what this instance knows. While the store
        // is away no other instance can end or change it either; what they
        // did just before is seen once it is back.
        Err(_) if here.is_some() => {
            return Ok(sessions.get(id, TransportKind::StreamableHttp, caller));
        }
        Err(error) => return Err(unavailable(&error)),
    };
    let Some(kept) = fetched else {
        // Ended elsewhere, or expired: ended here too.
        if here.is_some() {
            sessions.end(id);
        }
        return Ok(None);
    };
    let session = match here {
        // Held here: its owner is checked on the copy (below), and its
        // record, fixed since the handshake, is not read again.
        Some(session) => session,
        None => {
            let Ok(record) = serde_json::from_str::<Record>(&kept.record) else {
                // Written by a build that keeps another record (a rolling
                // upgrade): not served here, and said so, rather than ended
                // everywhere. (A session kept in another form altogether
                // reads as none: upgrades across such a change take a new
                // `--store-prefix`.)
                tracing::warn!(target: "droid", "a shared session's record is not one this build reads");
                return Ok(None);
            };
            // The record names its owner: a caller who is not gets nothing,
            // as for an unknown id, and the session is not brought here.
            if record.owner != caller.principal_key() {
                return Ok(None);
            }
            let lasting = lasting_of(&kept);
            let mut image = record.image;
            image.level = lasting.level;
            image.subscribed = lasting.subscribed.iter().cloned().collect();
            let adopted = sessions.adopt(server, id, record.owner, record.quota, |c| {
                c.restore(&image).is_ok()
            });
            match adopted {
                Ok(Some(session)) => session,
                Ok(None) => return Ok(None),
                Err(full) => return Err(sessions_full(&full, None)),
            }
        }
    };
    // Whatever changed elsewhere since this instance last read the session
    // is taken, and only that: a change this instance made meanwhile, not
    // yet kept in the store, is not undone. (A copy just settled from this
    // reading takes it again, which changes nothing.)
    take_reading(&session, &kept);
    Ok(sessions.get(id, TransportKind::StreamableHttp, caller))
}

/// Takes `kept`, a reading of `session` from the store, into this
/// instance's copy: what changed elsewhere since this instance last read
/// it.
fn take_reading(session: &Session, kept: &KeptSession) {
    if !session.would_take(kept.version) {
        return;
    }
    let lasting = lasting_of(kept);
    let taken = session.take(Synced {
        version: kept.version,
        lasting: lasting.clone(),
        stale: false,
    });
    if let (Some(before), Some(connection)) = (taken, session.connection()) {
        connection.apply(&before.change_to(&lasting));
    }
}

/// Reads `session` from the store again and takes what changed: told that
/// another instance changed it, or keeping it while it is in use without
/// requests. A session missing from the store is not ended here: one ended
/// elsewhere is told as such, and a record gone for another reason (a
/// Redis restarted empty) ends it at its next request, not in the middle
/// of its calls.
async fn read_again(sessions: &Sessions, shared: &SharedSessions, session: &Session) {
    if let Ok(Some(kept)) = shared.store.fetch(&session.id, ttl_ms(sessions)).await {
        take_reading(session, &kept);
    }
}

/// Reads `session` again, told that another instance changed it: at most
/// one reading under way per session, and one more after it for all that
/// were asked meanwhile.
fn reread(sessions: &Arc<Sessions>, shared: &SharedSessions, session: Arc<Session>) {
    if !session.start_rereading() {
        return;
    }
    let (sessions, shared) = (Arc::clone(sessions), shared.clone());
    tokio::spawn(async move {
        loop {
            session.rereading_now();
            read_again(&sessions, &shared, &session).await;
            if !session.reread_more() {
                break;
            }
        }
    });
}

/// Tells the other instances that the client of session `session`
/// cancelled its request `id`, which does not run here: the one running it
/// stops it. A balancer sends the cancellation wherever it likes. In the
/// background; a request that ended meanwhile is nothing to stop.
pub(super) fn relay_cancel(sessions: &Sessions, session: &Session, id: &RequestId) {
    let Some(shared) = &sessions.shared else {
        return;
    };
    let relay = Arc::clone(&shared.relay);
    let message = format!(
        "{}\n{}\ncancel\n{}",
        shared.instance,
        session.id,
        id.to_json()
    );
    tokio::spawn(async move {
        if let Err(error) = relay.send(SESSIONS_CHANNEL, &message).await {
            tracing::debug!(target: "droid", %error, "a cancellation could not be told to the other instances");
        }
    });
}

/// The channel on which an instance tells the others that it changed a
/// session's level or subscriptions, ended it, or that its client
/// cancelled a request.
const SESSIONS_CHANNEL: &str = "*sessions";

/// Tells the other instances that this one changed what session `id`
/// keeps (or ended it), so that those holding a copy read it again now
/// rather than at their next request of it: one holding the session's
/// `GET` stream may see no request of it for long, and it is the one that
/// sends the session's resource updates. In the background: the change is
/// kept already, and the client's answer does not wait on this.
fn tell_changed(shared: &SharedSessions, id: &str, ended: bool) {
    let relay = Arc::clone(&shared.relay);
    let message = if ended {
        format!("{}\n{id}\nended", shared.instance)
    } else {
        format!("{}\n{id}", shared.instance)
    };
    tokio::spawn(async move {
        if let Err(error) = relay.send(SESSIONS_CHANNEL, &message).await {
            tracing::debug!(target: "droid", %error, "a session's change could not be told to the other instances");
        }
    });
}

/// Hears the other instances tell of sessions they changed, for as long as
/// `sessions` is kept, and reads again each one this instance holds.
pub(super) fn spawn_session_changes(sessions: &Arc<Sessions>, shared: SharedSessions) {
    spawn_hearing(
        sessions,
        shared,
        SESSIONS_CHANNEL.to_owned(),
        |sessions, shared, text| {
            let mut parts = text.split('\n');
            let (Some(from), Some(id)) = (parts.next(), parts.next()) else {
                return;
            };
            if from == shared.instance {
                return;
            }
            let Some(session) = sessions.local(id) else {
                return;
            };
            match parts.next() {
                Some("ended") => {
                    sessions.end(id);
                }
                Some("cancel") => {
                    let target = parts
                        .next()
                        .and_then(|id| serde_json::from_str::<Value>(id).ok())
                        .as_ref()
                        .and_then(RequestId::from_json);
                    if let Some(target) = target {
                        session.cancel(&target);
                    }
                }
                _ => reread(sessions, shared, session),
            }
        },
    );
}

/// Ends the session `id` for `caller` everywhere: its record goes first,
/// so a store out of reach changes nothing (503, and the client may try
/// again), then this instance's copy; every other instance holding it is
/// told it ended, and ends its copy. `Ok(false)` when there is no
/// such session for `caller`.
pub(super) async fn end(
    sessions: &Sessions,
    id: &str,
    caller: &AuthContext,
) -> Result<bool, Response> {
    let Some(shared) = &sessions.shared else {
        let owned = sessions
            .get(id, TransportKind::StreamableHttp, caller)
            .is_some();
        return Ok(owned && sessions.end(id));
    };
    if sessions
        .local(id)
        .is_some_and(|s| s.transport != TransportKind::StreamableHttp)
    {
        return Ok(false);
    }
    // Looked up without settling it here: only its owner matters.
    let kept = shared
        .store
        .fetch(id, ttl_ms(sessions))
        .await
        .map_err(|e| unavailable(&e))?;
    let owner = kept
        .and_then(|kept| serde_json::from_str::<Record>(&kept.record).ok())
        .map(|record| record.owner);
    if owner.is_none_or(|owner| owner != caller.principal_key()) {
        return Ok(false);
    }
    shared.store.remove(id).await.map_err(|e| unavailable(&e))?;
    sessions.end(id);
    // The others end their copies now, not at the session's next request
    // there: a copy holding a stream would keep it open till then.
    tell_changed(shared, id, true);
    Ok(true)
}

/// Delivers the client's answer `response` to a request this instance did
/// not send: relayed to the instance whose name its id carries. Whether it
/// went anywhere.
pub(super) async fn relay_answer(
    sessions: &Sessions,
    session: &Session,
    id: &RequestId,
    response: &str,
) -> bool {
    let Some(shared) = &sessions.shared else {
        return false;
    };
    let Some(instance) = asker(id).filter(|name| *name != shared.instance) else {
        return false;
    };
    // The session's id (hex, no newline), a newline, the response as the
    // client wrote it: read back without parsing anything twice.
    let message = format!("{}\n{response}", session.id);
    if message.len() > MAX_RELAYED {
        tracing::warn!(target: "droid", "an answer of {} bytes was not relayed", message.len());
        return false;
    }
    match shared.relay.send(instance, &message).await {
        // Nobody heard it when the instance that asked is gone.
        Ok(heard) => heard > 0,
        Err(error) => {
            tracing::warn!(target: "droid", %error, "an answer could not be relayed to its instance");
            false
        }
    }
}

/// The instance a request id of ours names: `droid-<instance>-<n>`.
pub(super) fn asker(id: &RequestId) -> Option<&str> {
    let RequestId::String(text) = id else {
        return None;
    };
    let rest = text.strip_prefix("droid-")?;
    let (instance, number) = rest.rsplit_once('-')?;
    let named = !instance.is_empty()
        && instance.len() <= MAX_INSTANCE_NAME
        && instance
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    let numbered = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
    (named && numbered).then_some(instance)
}

/// Hears the answers other instances relay to this one, for as long as
/// `sessions` is kept, and hands each to the session that waits for it.
pub(super) fn spawn_listener(sessions: &Arc<Sessions>, shared: SharedSessions) {
    let channel = shared.instance.clone();
    spawn_hearing(sessions, shared, channel, |sessions, _, text| {
        deliver(sessions, text);
    });
}

/// Hears what is sent on `channel`, for as long as `sessions` is kept, and
/// acts on each message with `on`.
pub(super) fn spawn_hearing(
    sessions: &Arc<Sessions>,
    shared: SharedSessions,
    channel: String,
    on: fn(&Arc<Sessions>, &SharedSessions, &str),
) {
    let weak = Arc::downgrade(sessions);
    tokio::spawn(async move {
        let mut heard = loop {
            match shared.relay.listen(&channel).await {
                Ok(heard) => break heard,
                Err(error) => {
                    tracing::warn!(target: "droid", %error, "not yet hearing other instances; trying again");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    if weak.strong_count() == 0 {
                        return;
                    }
                }
            }
        };
        loop {
            // Woken now and then without a message, so a dropped table is
            // noticed on a quiet channel too; dropping `heard` then ends the
            // subscription.
            let text = tokio::select! {
                text = heard.recv() => text,
                () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {
                    if weak.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
            };
            let (Some(text), Some(sessions)) = (text, weak.upgrade()) else {
                return;
            };
            on(&sessions, &shared, &text);
        }
    });
}

/// Keeps the records of the sessions this instance serves without new
/// requests (a standing stream open, a long call or task running) from
/// idling out of the store, every quarter of the idle timeout, for as long
/// as `sessions` is kept; what each reading shows changed elsewhere is
/// taken.
pub(super) fn spawn_keeper(sessions: &Arc<Sessions>) {
    let weak = Arc::downgrade(sessions);
    let every = (sessions.idle() / 4).max(std::time::Duration::from_millis(50));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(sessions) = weak.upgrade() else {
                return;
            };
            let Some(shared) = sessions.shared.clone() else {
                return;
            };
            for session in sessions.busy_shared() {
                // Read, so restarted.
                read_again(&sessions, &shared, &session).await;
            }
        }
    });
}

/// Hands one relayed answer to its session, if this instance holds it.
fn deliver(sessions: &Sessions, text: &str) {
    let Some((id, response)) = text.split_once('\n') else {
        return;
    };
    let Some(session) = sessions.local(id) else {
        return;
    };
    let Ok(Incoming::Single(Message::Response(response))) = parse(response.as_bytes()) else {
        return;
    };
    if let Some(request) = response.id.request_id() {
        let _delivered = session.answer(request, response.outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instance_is_read_from_our_own_request_ids_only() {
        let id = |text: &str| RequestId::String(text.to_owned());
        assert_eq!(asker(&id("droid-web-7-3a-12")), Some("web-7-3a"));
        assert_eq!(asker(&id("droid-12")), None);
        assert_eq!(asker(&id("droid-a-x1")), None);
        assert_eq!(
            asker(&id("droid-*-1")),
            None,
            "the name every instance hears"
        );
        assert_eq!(asker(&id("droid-a b-1")), None);
        assert_eq!(asker(&id("droid-a-")), None);
        assert_eq!(asker(&id("other-a-1")), None);
        assert_eq!(asker(&RequestId::Number(4)), None);
    }
}
