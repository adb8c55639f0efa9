//! What an operator's page shows of a running gateway besides its
//! upstreams and tool catalog: the prompts, resources and templates each
//! upstream offers, the live sessions with their tools, and the recent
//! translations of upstream replies.

use std::time::Duration;

use futures_util::future::join_all;

use super::names::{outer_name, outer_uri};
use super::runtime::Gateway;
use super::state::lock;
use crate::application::bridge::{Bridge, Report};
use crate::application::client::{Client, ClientError};
use crate::domain::SessionId;
use crate::domain::catalog::ToolId;

/// The most sessions [`Gateway::sessions`] lists: a page shows the first
/// of them, and a gateway may hold many thousands.
pub const MAX_LISTED_SESSIONS: usize = 256;

/// The most prompts, resources or templates of one upstream that
/// [`Gateway::primitives`] lists.
pub const MAX_LISTED_PRIMITIVES: usize = 512;

/// What one upstream offers besides tools, under the gateway's names (a
/// prompt as `upstream/name`, a resource or template with the upstream's
/// URI prefix).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpstreamPrimitives {
    /// The upstream.
    pub upstream: String,
    /// Its prompts.
    pub prompts: Vec<String>,
    /// Its resources.
    pub resources: Vec<String>,
    /// Its resource templates.
    pub templates: Vec<String>,
    /// Why a list is missing or short: the upstream is not connected, did
    /// not answer in time, or refused.
    pub unlisted: Option<String>,
}

/// One session as an operator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionOverview {
    /// The session.
    pub session: SessionId,
    /// The tools it was given when it began (its core set).
    pub core: Vec<ToolId>,
    /// The tools it activated since, in id order.
    pub activated: Vec<ToolId>,
}

/// A translation of one upstream's reply for an older client.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct UpstreamReport {
    /// The upstream whose reply was translated.
    pub upstream: String,
    /// What was translated, and what was lost.
    pub report: Report,
}

impl Gateway {
    /// The live sessions (at most [`MAX_LISTED_SESSIONS`], in id order)
    /// with their core and activated tools.
    #[must_use]
    pub fn sessions(&self) -> Vec<SessionOverview> {
        let state = lock(&self.inner.state);
        state
            .sessions
            .iter()
            .take(MAX_LISTED_SESSIONS)
            .map(|(session, set)| SessionOverview {
                session: *session,
                core: set.core_ids().cloned().collect(),
                activated: set.activated().map(|a| a.id.clone()).collect(),
            })
            .collect()
    }

    /// The translations each upstream's replies recently took, upstream by
    /// upstream, each upstream's oldest first.
    #[must_use]
    pub fn reports(&self) -> Vec<UpstreamReport> {
        // The bridges are copied out first: reading their reports takes
        // their own lock, not to be held under the gateway's.
        let bridges: Vec<_> = lock(&self.inner.state)
            .upstreams
            .iter()
            .filter_map(|(name, upstream)| Some((name.clone(), upstream.current_bridge()?.clone())))
            .collect();
        bridges
            .into_iter()
            .flat_map(|(upstream, bridge)| {
                bridge
                    .reports()
                    .into_iter()
                    .map(move |report| UpstreamReport {
                        upstream: upstream.clone(),
                        report,
                    })
            })
            .collect()
    }

    /// The prompts, resources and templates each connected upstream offers
    /// now, asked of it (each kind only of an upstream that declares it),
    /// every upstream at once and each within `timeout`; at most
    /// [`MAX_LISTED_PRIMITIVES`] of each kind.
    pub async fn primitives(&self, timeout: Duration) -> Vec<UpstreamPrimitives> {
        let upstreams: Vec<(String, String, Option<Client>)> = lock(&self.inner.state)
            .upstreams
            .iter()
            .map(|(name, upstream)| {
                let client = upstream.current_bridge().and_then(Bridge::client);
                (name.clone(), upstream.prefix.clone(), client)
            })
            .collect();
        join_all(
            upstreams
                .into_iter()
                .map(|(upstream, prefix, client)| async move {
                    let Some(client) = client else {
                        return UpstreamPrimitives {
                            upstream,
                            unlisted: Some("not connected".to_owned()),
                            ..UpstreamPrimitives::default()
                        };
                    };
                    match tokio::time::timeout(timeout, listed(&client)).await {
                        Ok(Ok((prompts, resources, templates))) => UpstreamPrimitives {
                            prompts: named(prompts, |p| outer_name(&upstream, &p)),
                            resources: named(resources, |uri| outer_uri(&prefix, &uri)),
                            templates: named(templates, |uri| outer_uri(&prefix, &uri)),
                            upstream,
                            unlisted: None,
                        },
                        Ok(Err(error)) => UpstreamPrimitives {
                            upstream,
                            unlisted: Some(error.to_string()),
                            ..UpstreamPrimitives::default()
                        },
                        Err(_) => UpstreamPrimitives {
                            upstream,
                            unlisted: Some(format!("no answer within {} ms", timeout.as_millis())),
                            ..UpstreamPrimitives::default()
                        },
                    }
                }),
        )
        .await
    }
}

/// What `client`'s server offers of prompts, resources and templates, by
/// name and URI, each kind only if it declares it.
async fn listed(client: &Client) -> Result<(Vec<String>, Vec<String>, Vec<String>), ClientError> {
    let capabilities = client.server().map(|s| s.capabilities).unwrap_or_default();
    let mut prompts = Vec::new();
    let mut resources = Vec::new();
    let mut templates = Vec::new();
    if capabilities.prompts.is_some() {
        prompts = first_pages(|cursor| async move {
            let page = client.list_prompts(cursor.as_deref()).await?.value;
            Ok((
                page.prompts.into_iter().map(|p| p.name).collect(),
                page.next_cursor,
            ))
        })
        .await?;
    }
    if capabilities.resources.is_some() {
        resources = first_pages(|cursor| async move {
            let page = client.list_resources(cursor.as_deref()).await?.value;
            Ok((
                page.resources.into_iter().map(|r| r.uri).collect(),
                page.next_cursor,
            ))
        })
        .await?;
        templates = first_pages(|cursor| async move {
            let page = client
                .list_resource_templates(cursor.as_deref())
                .await?
                .value;
            let uris = page.resource_templates.into_iter().map(|t| t.uri_template);
            Ok((uris.collect(), page.next_cursor))
        })
        .await?;
    }
    Ok((prompts, resources, templates))
}

/// The items of a paginated list, page after page, until there are
/// [`MAX_LISTED_PRIMITIVES`] or the list ends: no page is asked for that
/// would only be cut off.
async fn first_pages<F, Fut>(mut page: F) -> Result<Vec<String>, ClientError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<(Vec<String>, Option<String>), ClientError>>,
{
    /// A server that pages out empty pages (or the same cursor) is asked
    /// no more than this.
    const MAX_PAGES: usize = 32;
    let mut items = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let (more, next) = page(cursor.take()).await?;
        items.extend(more);
        match next {
            Some(next) if items.len() < MAX_LISTED_PRIMITIVES => cursor = Some(next),
            _ => break,
        }
    }
    Ok(items)
}

/// At most [`MAX_LISTED_PRIMITIVES`] of `names`, each as the gateway names it.
fn named(names: Vec<String>, rename: impl Fn(String) -> String) -> Vec<String> {
    names
        .into_iter()
        .take(MAX_LISTED_PRIMITIVES)
        .map(rename)
        .collect()
}
