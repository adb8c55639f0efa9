//! The 2024-11-05 HTTP+SSE client transport.
//!
//! The client opens one SSE stream with GET; the server's first event,
//! `endpoint`, names the URL to POST messages to. Every message from the
//! server, responses included, arrives as a `message` event on that stream,
//! and each POST is only acknowledged (`202`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use reqwest::header::{self, HeaderMap, HeaderValue};
use tokio::task::JoinHandle;
use url::Url;

use super::super::authorizer::Authorizer;
use super::super::tls::{describe, redacted};
use super::credentials::Credentials;
use super::streamable::{HttpOptions, cure, excerpt, read_limited};
use crate::application::client::{Inbound, InboundTx, Link, LinkError, Outgoing};
use crate::domain::jsonrpc;

/// How long the server may take to name its endpoint.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP+SSE transport.
pub struct LegacySse {
    http: reqwest::Client,
    /// The stream's URL, as given: the protected resource a refusal of a
    /// POST is about.
    url: Url,
    endpoint: Url,
    inbound: InboundTx,
    authorizer: Option<Arc<dyn Authorizer>>,
    /// Sent with every request, the stream's GET and each POST.
    headers: HeaderMap,
    /// What is taken out of a server's answers before they are quoted.
    credentials: Arc<Credentials>,
    stream: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for LegacySse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacySse")
            .field("endpoint", &self.endpoint.as_str())
            .finish_non_exhaustive()
    }
}

impl LegacySse {
    /// Opens the stream at `url` and waits for the server to name its
    /// endpoint.
    ///
    /// # Errors
    ///
    /// [`LinkError::Http`] when the GET is refused or is not an event stream,
    /// [`LinkError::Io`] when no `endpoint` event comes in time or it names
    /// another origin.
    pub async fn connect(
        url: Url,
        inbound: InboundTx,
        authorizer: Option<Arc<dyn Authorizer>>,
        options: &HttpOptions,
    ) -> Result<Self, LinkError> {
        let http = options
            .trust
            .client_builder()
            .map_err(|e| LinkError::Io(e.to_string()))?
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| LinkError::Io(e.to_string()))?;
        let mut challenges = 0;
        let response = loop {
            let mut request = http
                .get(url.clone())
                .headers(options.headers.clone())
                .header(
                    header::ACCEPT,
                    HeaderValue::from_static("text/event-stream"),
                );
            if let Some(value) = authorization(authorizer.as_deref()).await? {
                request = request.header(header::AUTHORIZATION, value);
            }
            let response = tokio::time::timeout(ENDPOINT_TIMEOUT, request.send())
                .await
                .map_err(|_| LinkError::Io(format!("{}: no answer in time", redacted(&url))))?
                .map_err(|e| LinkError::Io(describe(&e)))?;
            if !cure(authorizer.as_deref(), &response, &url, &mut challenges).await? {
                break response;
            }
        };
        let status = response.status();
        let streams = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !status.is_success() || !streams {
            return Err(LinkError::Http {
                status: status.as_u16(),
                body: "not an HTTP+SSE endpoint".to_owned(),
            });
        }
        let mut events =
            super::event_bytes::bounded_events(response, super::streamable::MAX_BODY).eventsource();
        let first = tokio::time::timeout(ENDPOINT_TIMEOUT, events.next())
            .await
            .map_err(|_| LinkError::Io("the server named no endpoint in time".to_owned()))?;
        let endpoint = match first {
            Some(Ok(event)) if event.event == "endpoint" => url
                .join(event.data.trim())
                .map_err(|e| LinkError::Io(format!("unusable endpoint: {e}")))?,
            _ => {
                return Err(LinkError::Io(
                    "the first event was not `endpoint`".to_owned(),
                ));
            }
        };
        if endpoint.origin() != url.origin() {
            // Posting to another origin would hand it the caller's messages
            // and credentials.
            return Err(LinkError::Io(format!(
                "the endpoint {endpoint} is on another origin"
            )));
        }
        let credentials = Arc::new(Credentials::new(&options.headers, &url));
        let tx = inbound.clone();
        let redacting = Arc::clone(&credentials);
        let task = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let Ok(event) = event else {
                    break;
                };
                if event.event != "message" && !event.event.is_empty() {
                    continue;
                }
                let item = match jsonrpc::value_from_str(&event.data) {
                    Ok(mut message) => {
                        redacting.redact_errors(&mut message);
                        Inbound::Message(message)
                    }
                    Err(_) => Inbound::Malformed(event.data.chars().take(200).collect()),
                };
                if tx.send(item).await.is_err() {
                    return;
                }
            }
            let _ = tx
                .send(Inbound::Closed(Some(
                    "the server closed the event stream".to_owned(),
                )))
                .await;
        });
        Ok(Self {
            http,
            credentials,
            url,
            endpoint,
            inbound,
            authorizer,
            headers: options.headers.clone(),
            stream: Mutex::new(Some(task)),
        })
    }
}

async fn authorization(
    authorizer: Option<&dyn Authorizer>,
) -> Result<Option<HeaderValue>, LinkError> {
    let Some(authorizer) = authorizer else {
        return Ok(None);
    };
    let value = authorizer
        .authorization()
        .await
        .map_err(|e| LinkError::Unauthorized(e.to_string()))?;
    Ok(value.and_then(|v| HeaderValue::from_str(&v).ok()))
}

impl Link for LegacySse {
    fn send(&self, message: Outgoing) -> BoxFuture<'_, Result<(), LinkError>> {
        Box::pin(async move {
            let body = serde_json::to_vec(&message.message)
                .map_err(|e| LinkError::Io(format!("unwritable message: {e}")))?;
            let mut challenges = 0;
            let response = loop {
                let mut headers = self.headers.clone();
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                if let Some(value) = authorization(self.authorizer.as_deref()).await? {
                    if let Ok(given) = value.to_str() {
                        self.credentials.given(given);
                    }
                    headers.insert(header::AUTHORIZATION, value);
                }
                let response = self
                    .http
                    .post(self.endpoint.clone())
                    .headers(headers)
                    .body(body.clone())
                    // Every POST is only acknowledged; the answers come on
                    // the stream.
                    .timeout(super::streamable::ACK_TIMEOUT)
                    .send()
                    .await
                    .map_err(|e| LinkError::Io(describe(&e)))?;
                // A refusal a new token may cure (one rotated in a file,
                // an expired one refreshed) is answered and sent again.
                if !cure(
                    self.authorizer.as_deref(),
                    &response,
                    &self.url,
                    &mut challenges,
                )
                .await?
                {
                    break response;
                }
            };
            let status = response.status();
            if status.is_success() {
                return Ok(());
            }
            let body = read_limited(response).await.unwrap_or_default();
            let error = LinkError::Http {
                status: status.as_u16(),
                body: excerpt(&body, &self.credentials),
            };
            match message.request_id() {
                // The answer would have come on the stream; it never will.
                Some(id) => {
                    let _ = self.inbound.send(Inbound::Failed { id, error }).await;
                    Ok(())
                }
                None => Err(error),
            }
        })
    }

    fn is_stream(&self) -> bool {
        false
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(task) = self
                .stream
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
            {
                task.abort();
            }
            let _ = self.inbound.send(Inbound::Closed(None)).await;
        })
    }
}

impl Drop for LegacySse {
    fn drop(&mut self) {
        if let Some(task) = self
            .stream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}
