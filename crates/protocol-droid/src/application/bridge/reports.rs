//! Translating a reply for the client's revision, and keeping a report of
//! every downgrade made (in the bridge and, when asked, in the reply's
//! `_meta`).

use serde_json::{Map, Value, json};

use super::content::{lift_tool_result, translate};
use super::lower::Lowering;
use super::runtime::{Bridge, MAX_REPORTS, REPORT_META, Report};
use super::upstream::lock;
use crate::application::client::Answer;
use crate::domain::ir::{LowerError, ToolResult, TranslationReport};
use crate::domain::{Leg, ProtocolVersion};

impl Bridge {
    /// Translates a result from the upstream's revision into the client's.
    pub(super) fn translate(
        &self,
        method: &str,
        result: Value,
        from: ProtocolVersion,
        leg: &Leg,
        report: &mut TranslationReport,
    ) -> Result<Value, LowerError> {
        let policy = self.inner.options.policy;
        if method == "tools/list" {
            self.note_task_tools(&result);
        }
        let mut value = if method == "tools/call" {
            let mut reply = Map::new();
            reply.insert("result".to_owned(), result);
            let translated = translate(reply, from, leg, policy)?;
            report.absorb(&translated.report);
            let mut reply = translated.reply;
            reply.remove("result").unwrap_or(Value::Null)
        } else {
            result
        };
        Lowering {
            leg,
            policy,
            report,
        }
        .result(method, &mut value)?;
        if method == "tools/list" {
            self.offer_as_tasks(&mut value, leg);
            self.note_tools(&value);
        }
        Ok(value)
    }

    /// A `tools/call` result from the upstream, read into the model and
    /// made readable by the client's leg; `Ok(Err(why))` when it is not a
    /// tool result.
    pub(super) fn translate_tool_result(
        &self,
        result: Answer,
        leg: &Leg,
        report: &mut TranslationReport,
    ) -> Result<Result<ToolResult, serde_json::Error>, LowerError> {
        lift_tool_result(result, leg, self.inner.options.policy, report)
    }

    /// [`record`](Self::record) for a result read into the model.
    pub(super) fn record_typed(
        &self,
        method: &str,
        report: &TranslationReport,
        result: &mut ToolResult,
    ) {
        self.keep(method, report);
        if self.inner.options.report_meta {
            result
                .meta
                .get_or_insert_with(Map::new)
                .insert(REPORT_META.to_owned(), report_meta(report));
        }
    }

    /// Logs a translation, keeps it, and puts it in the reply if asked to.
    pub(super) fn record(&self, method: &str, report: &TranslationReport, value: &mut Value) {
        self.keep(method, report);
        if self.inner.options.report_meta {
            if let Value::Object(object) = value {
                let meta = object
                    .entry("_meta")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(meta) = meta {
                    meta.insert(REPORT_META.to_owned(), report_meta(report));
                }
            }
        }
    }

    /// Logs a translation and keeps it for [`Bridge::reports`].
    pub(super) fn keep(&self, method: &str, report: &TranslationReport) {
        let lines: Vec<String> = report
            .downgrades()
            .iter()
            .map(ToString::to_string)
            .collect();
        for downgrade in report.downgrades() {
            self.inner.options.observer.translated(downgrade.feature);
        }
        tracing::info!(
            target: "droid::bridge",
            method,
            revision = %report.target(),
            downgrades = ?lines,
            "translated a reply for an older client"
        );
        {
            let mut reports = lock(&self.inner.reports);
            if reports.len() >= MAX_REPORTS {
                reports.pop_front();
            }
            reports.push_back(Report {
                method: method.to_owned(),
                report: report.clone(),
            });
        }
    }
}

/// A report as it goes in a reply's `_meta`, under [`REPORT_META`].
fn report_meta(report: &TranslationReport) -> Value {
    let downgrades: Vec<Value> = report
        .downgrades()
        .iter()
        .map(|d| json!({ "feature": format!("{:?}", d.feature), "detail": d.detail }))
        .collect();
    json!({ "revision": report.target().as_str(), "downgrades": downgrades })
}
