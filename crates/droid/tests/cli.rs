//! The command line, run as a user runs it.

use std::process::{Command, Output};

type TestError = Box<dyn std::error::Error>;

fn droid(args: &[&str]) -> Result<Output, TestError> {
    Ok(Command::new(env!("CARGO_BIN_EXE_droid"))
        .args(args)
        .output()?)
}

#[test]
fn serve_says_what_it_will_serve_and_exits_cleanly() -> Result<(), TestError> {
    let out = droid(&["serve"])?;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout)?;
    assert!(text.contains("transport: stdio"), "{text}");
    assert!(
        text.contains("2024-11-05") && text.contains("2026-07-28"),
        "{text}"
    );
    Ok(())
}

#[test]
fn serve_restricted_to_one_revision_offers_only_that_one() -> Result<(), TestError> {
    let out = droid(&[
        "serve",
        "--revisions",
        "2025-11-25",
        "--listen",
        "127.0.0.1:0",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout)?;
    assert!(text.contains("revisions: 2025-11-25\n"), "{text}");
    assert!(text.contains("http://127.0.0.1:0/mcp"), "{text}");
    Ok(())
}

#[test]
fn an_unknown_revision_is_refused_by_name() -> Result<(), TestError> {
    let out = droid(&["serve", "--revisions", "2024-10-07"])?;
    assert!(!out.status.success());
    let text = String::from_utf8(out.stderr)?;
    assert!(text.contains("2024-10-07"), "{text}");
    Ok(())
}

#[test]
fn the_revision_table_shows_structured_output_arriving_in_2025_06_18() -> Result<(), TestError> {
    let out = droid(&["revisions"])?;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout)?;
    let row = text
        .lines()
        .find(|l| l.starts_with("ToolStructuredOutput "))
        .ok_or("no ToolStructuredOutput row")?;
    let marks: Vec<&str> = row.split_whitespace().skip(1).collect();
    assert_eq!(marks, ["-", "-", "yes", "yes", "yes"]);
    Ok(())
}
