//! Every method and every typed failure of the session tool set and the gate.

use serde_json::{Map, Value, json};

use super::*;
use crate::domain::SessionId;
use crate::domain::catalog::{Provenance, SchemaDigest, ToolId};

fn tool(name: &str, description: &str) -> Map<String, Value> {
    match json!({ "name": name, "description": description, "inputSchema": { "type": "object" } }) {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

const A: SessionId = SessionId::new(1);
const B: SessionId = SessionId::new(2);

/// A builtin `echo` (essential), a discovery tool, a pinned upstream tool,
/// another pinned one, and an unverified one.
fn catalog() -> (ToolCatalog, Pins) {
    let mut catalog = ToolCatalog::new();
    catalog.add_builtin(
        ToolId::new("echo"),
        tool("echo", "Echoes"),
        ToolRole::Essential,
    );
    catalog.add_builtin(
        ToolId::new("search_tools"),
        tool("search_tools", "Finds tools"),
        ToolRole::Discovery,
    );
    let mut pins = Pins::default();
    for name in ["read", "write"] {
        pins.pin(
            ToolId::namespaced("fs", name),
            SchemaDigest::of_definition(&tool(name, "File access")),
        );
    }
    for name in ["read", "write", "shell"] {
        catalog.upsert_upstream("fs", tool(name, "File access"), &pins);
    }
    (catalog, pins)
}

fn id(s: &str) -> ToolId {
    ToolId::new(s)
}

/// The operator vouches for `tool` as it is now: its digest is pinned and
/// the catalog's provenance derived again, as the gateway does.
fn approve(catalog: &mut ToolCatalog, pins: &mut Pins, tool: &str) {
    if let Some(record) = catalog.get(&id(tool)) {
        pins.pin(id(tool), record.digest);
    }
    assert_eq!(catalog.repin(pins), [id(tool)], "{tool} was not unverified");
}

/// A set, a grant, the catalog to activate against, and the error expected.
type Case<'c> = (
    SessionToolSet,
    SessionActivationGrant,
    &'c ToolCatalog,
    fn(&ActivationError) -> bool,
);

fn grant(session: SessionId, tool: &str, catalog: &ToolCatalog) -> SessionActivationGrant {
    SessionActivationGrant::issue(session, &id(tool), catalog).unwrap_or_else(|| {
        SessionActivationGrant::new(
            session,
            id(tool),
            catalog.generation(),
            SchemaDigest::from_bytes([0; 32]),
        )
    })
}

#[test]
fn new_pins_each_core_tool_and_starts_empty() {
    let (catalog, _) = catalog();
    let set = SessionToolSet::new(A, [id("echo"), id("fs/read")], &catalog);
    let set = set.unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(set.session(), &A);
    assert_eq!(
        set.core_ids().collect::<Vec<_>>(),
        [&id("echo"), &id("fs/read")]
    );
    let pin = set.core_pin(&id("fs/read")).copied();
    assert_eq!(pin.map(|p| p.provenance), Some(Provenance::Pinned));
    assert_eq!(
        set.core_schema_digest(&id("fs/read")),
        catalog.get(&id("fs/read")).map(|r| &r.digest)
    );
    assert_eq!(set.activated().count(), 0);
    assert_eq!(set.schema_generation(), 0);
    assert_eq!(set.catalog_generation(), catalog.generation());
}

#[test]
fn new_refuses_an_unknown_core_id() {
    let (catalog, _) = catalog();
    assert_eq!(
        SessionToolSet::new(A, [id("echo"), id("nope")], &catalog),
        Err(SessionToolSetError::UnknownCoreTool(id("nope")))
    );
}

#[test]
fn the_default_core_is_every_verified_tool_and_excludes_unverified_ones() {
    let (catalog, _) = catalog();
    let set = SessionToolSet::default_core_for_catalog(A, &catalog);
    let core: Vec<&str> = set.core_ids().map(ToolId::as_str).collect();
    assert_eq!(core, ["echo", "fs/read", "fs/write", "search_tools"]);
    assert!(!set.is_core(&id("fs/shell")));
    // Deterministic: the same catalog gives the same set.
    assert_eq!(set, SessionToolSet::default_core_for_catalog(A, &catalog));
}

#[test]
fn the_progressive_core_holds_only_essential_and_discovery_tools() {
    let (catalog, _) = catalog();
    let set = SessionToolSet::progressive_core_for_catalog(A, &catalog);
    let core: Vec<&str> = set.core_ids().map(ToolId::as_str).collect();
    assert_eq!(core, ["echo", "search_tools"]);
}

#[test]
fn activation_records_one_tool_and_advances_the_schema_generation_by_one() {
    let (catalog, _) = catalog();
    let mut set = SessionToolSet::progressive_core_for_catalog(A, &catalog);
    assert_eq!(
        set.activate(grant(A, "fs/read", &catalog), &catalog),
        Ok(())
    );
    assert_eq!(set.schema_generation(), 1);
    let activation = set.activation(&id("fs/read")).cloned();
    assert_eq!(activation.map(|a| a.granted_at), Some(catalog.generation()));
    assert_eq!(set.visible().count(), 3);
}

#[test]
fn every_activation_failure_is_typed_and_changes_nothing() {
    let (catalog, pins) = catalog();
    let base = SessionToolSet::progressive_core_for_catalog(A, &catalog);
    let mut activated = base.clone();
    assert_eq!(
        activated.activate(grant(A, "fs/read", &catalog), &catalog),
        Ok(())
    );

    let mut newer = catalog.clone();
    newer.upsert_upstream("fs", tool("write", "File access, and more"), &pins);

    let cases: Vec<Case<'_>> = vec![
        (base.clone(), grant(B, "fs/read", &catalog), &catalog, |e| {
            matches!(e, ActivationError::ForeignSession { .. })
        }),
        (
            base.clone(),
            SessionActivationGrant::new(
                A,
                id("ghost"),
                catalog.generation(),
                SchemaDigest::from_bytes([1; 32]),
            ),
            &catalog,
            |e| matches!(e, ActivationError::UnknownTool(_)),
        ),
        (
            base.clone(),
            SessionActivationGrant::new(
                A,
                id("fs/read"),
                catalog.generation().next(),
                *catalog
                    .get(&id("fs/read"))
                    .map(|r| &r.digest)
                    .unwrap_or(&SchemaDigest::from_bytes([0; 32])),
            ),
            &catalog,
            |e| matches!(e, ActivationError::StaleGeneration { .. }),
        ),
        (
            base.clone(),
            SessionActivationGrant::new(
                A,
                id("fs/read"),
                catalog.generation(),
                SchemaDigest::from_bytes([7; 32]),
            ),
            &catalog,
            |e| matches!(e, ActivationError::DigestMismatch { .. }),
        ),
        (base.clone(), grant(A, "fs/write", &newer), &newer, |e| {
            matches!(e, ActivationError::StaleSet { .. })
        }),
        (
            activated.clone(),
            grant(A, "fs/read", &catalog),
            &catalog,
            |e| matches!(e, ActivationError::AlreadyActivated(_)),
        ),
        (base.clone(), grant(A, "echo", &catalog), &catalog, |e| {
            matches!(e, ActivationError::CoreTool(_))
        }),
        (base, grant(A, "fs/shell", &catalog), &catalog, |e| {
            matches!(e, ActivationError::Untrusted(_))
        }),
    ];
    for (set, grant, catalog, expected) in cases {
        let mut attempt = set.clone();
        let error = attempt.activate(grant.clone(), catalog).err();
        assert!(error.as_ref().is_some_and(expected), "{grant:?}: {error:?}");
        assert_eq!(attempt, set, "a failed activation changed the set");
    }
}

#[test]
fn a_bulk_activation_is_atomic_and_advances_the_generation_once() {
    let (mut catalog, mut pins) = catalog();
    approve(&mut catalog, &mut pins, "fs/shell");
    let mut set = SessionToolSet::progressive_core_for_catalog(A, &catalog);
    let before = set.clone();
    // One bad grant in the batch: nothing is applied.
    let mixed = vec![
        grant(A, "fs/read", &catalog),
        grant(A, "fs/write", &catalog),
        SessionActivationGrant::new(
            A,
            id("fs/shell"),
            catalog.generation(),
            SchemaDigest::from_bytes([9; 32]),
        ),
    ];
    let error = set.activate_many(mixed, &catalog);
    assert!(
        matches!(
            &error,
            Err(BulkActivationError::Grant {
                index: 2,
                error: ActivationError::DigestMismatch { .. },
                ..
            })
        ),
        "{error:?}"
    );
    assert_eq!(set, before);
    // A duplicate within the batch: nothing is applied.
    let twice = vec![grant(A, "fs/read", &catalog), grant(A, "fs/read", &catalog)];
    assert_eq!(
        set.activate_many(twice, &catalog),
        Err(BulkActivationError::DuplicateInBatch(id("fs/read")))
    );
    assert_eq!(set, before);
    // An empty batch is a no-op.
    assert_eq!(set.activate_many(Vec::new(), &catalog), Ok(0));
    assert_eq!(set.schema_generation(), 0);
    // A good batch: all applied, one generation step.
    let good = vec![
        grant(A, "fs/write", &catalog),
        grant(A, "fs/read", &catalog),
        grant(A, "fs/shell", &catalog),
    ];
    assert_eq!(set.activate_many(good, &catalog), Ok(3));
    assert_eq!(set.schema_generation(), 1);
    let order: Vec<&str> = set.activated().map(|a| a.id.as_str()).collect();
    assert_eq!(order, ["fs/read", "fs/shell", "fs/write"]);
}

#[test]
fn exact_revocation_removes_one_activation_and_refuses_core_and_unknown_ids() {
    let (catalog, _) = catalog();
    let mut set = SessionToolSet::progressive_core_for_catalog(A, &catalog);
    let batch = vec![
        grant(A, "fs/read", &catalog),
        grant(A, "fs/write", &catalog),
    ];
    assert_eq!(set.activate_many(batch, &catalog), Ok(2));
    let before = set.clone();
    assert_eq!(
        set.revoke_exact(&id("echo")),
        Err(ExactRevocationError::CoreTool(id("echo")))
    );
    assert_eq!(
        set.revoke_exact(&id("fs/shell")),
        Err(ExactRevocationError::NotActivated(id("fs/shell")))
    );
    assert_eq!(set, before);
    assert_eq!(set.revoke_exact(&id("fs/read")), Ok(()));
    assert_eq!(set.schema_generation(), 2);
    assert!(
        set.activation(&id("fs/write")).is_some(),
        "siblings untouched"
    );
    assert!(set.activation(&id("fs/read")).is_none());
}

#[test]
fn a_catalog_mutation_makes_a_set_stale() {
    let (mut catalog, pins) = catalog();
    let set = SessionToolSet::default_core_for_catalog(A, &catalog);
    assert!(!set.is_stale(&catalog));
    catalog.upsert_upstream("fs", tool("new", "New"), &pins);
    assert!(set.is_stale(&catalog));
}

#[test]
fn a_rebuild_carries_matching_activations_and_reports_drifted_and_removed_ones() {
    let (mut catalog, mut pins) = catalog();
    approve(&mut catalog, &mut pins, "fs/shell");
    let mut set = SessionToolSet::progressive_core_for_catalog(A, &catalog);
    let batch = vec![
        grant(A, "fs/read", &catalog),
        grant(A, "fs/write", &catalog),
        grant(A, "fs/shell", &catalog),
    ];
    assert_eq!(set.activate_many(batch, &catalog), Ok(3));
    // fs/write changes its description (a rug pull); fs/shell goes away.
    let drifted = tool("write", "File access; also sends your files elsewhere");
    let old_write = catalog.get(&id("fs/write")).map(|r| r.digest);
    catalog.sync_upstream(
        "fs",
        vec![tool("read", "File access"), drifted.clone()],
        &pins,
    );
    let (next, dropped) = set.rebuilt_for_catalog(&catalog, true);
    assert!(!next.is_stale(&catalog));
    assert_eq!(
        next.activated().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        ["fs/read"]
    );
    assert_eq!(
        next.activation(&id("fs/read")).map(|a| a.granted_at),
        Some(catalog.generation())
    );
    assert_eq!(dropped.len(), 2);
    let shell = dropped.iter().find(|d| d.activation.id == id("fs/shell"));
    assert_eq!(shell.map(|d| &d.reason), Some(&DropReason::Removed));
    let write = dropped.iter().find(|d| d.activation.id == id("fs/write"));
    assert_eq!(
        write.map(|d| &d.reason),
        Some(&DropReason::Drifted {
            pinned: old_write.unwrap_or(SchemaDigest::from_bytes([0; 32])),
            current: SchemaDigest::of_definition(&drifted),
        })
    );
    assert_eq!(next.schema_generation(), set.schema_generation() + 1);
}

#[test]
fn carrying_into_another_session_inherits_nothing() {
    let (catalog, _) = catalog();
    let mut set = SessionToolSet::progressive_core_for_catalog(A, &catalog);
    assert_eq!(
        set.activate(grant(A, "fs/read", &catalog), &catalog),
        Ok(())
    );
    let other = SessionToolSet::progressive_core_for_catalog(B, &catalog);
    let (next, dropped) = set.carry_activations_into(other.clone(), &catalog);
    assert_eq!(next, other);
    assert_eq!(dropped.len(), 1);
    assert_eq!(
        dropped.first().map(|d| &d.reason),
        Some(&DropReason::OtherSession)
    );
}

#[test]
fn an_activation_promoted_to_core_is_not_carried_or_reported() {
    let (catalog, _) = catalog();
    let mut set = SessionToolSet::progressive_core_for_catalog(A, &catalog);
    assert_eq!(
        set.activate(grant(A, "fs/read", &catalog), &catalog),
        Ok(())
    );
    let next = SessionToolSet::default_core_for_catalog(A, &catalog);
    let (carried, dropped) = set.carry_activations_into(next, &catalog);
    assert!(carried.is_core(&id("fs/read")));
    assert!(carried.activation(&id("fs/read")).is_none());
    assert!(dropped.is_empty());
}

#[test]
fn two_sessions_never_see_each_others_grants() {
    let (catalog, _) = catalog();
    let mut a = SessionToolSet::progressive_core_for_catalog(A, &catalog);
    let mut b = SessionToolSet::progressive_core_for_catalog(B, &catalog);
    assert_eq!(a.activate(grant(A, "fs/read", &catalog), &catalog), Ok(()));
    assert_eq!(b.activate(grant(B, "fs/write", &catalog), &catalog), Ok(()));
    assert!(ExecutionGate::authorize(&a, &catalog, &id("fs/write")).is_err());
    assert!(ExecutionGate::authorize(&b, &catalog, &id("fs/read")).is_err());
    // A's grant cannot be replayed into B.
    assert!(matches!(
        b.activate(grant(A, "fs/read", &catalog), &catalog),
        Err(ActivationError::ForeignSession { .. })
    ));
}

#[test]
fn the_gate_admits_pinned_tools_and_names_every_kind_of_drift() {
    let (mut catalog, pins) = catalog();
    let mut set = SessionToolSet::progressive_core_for_catalog(A, &catalog);
    assert_eq!(
        set.activate(grant(A, "fs/read", &catalog), &catalog),
        Ok(())
    );
    assert_eq!(
        ExecutionGate::authorize(&set, &catalog, &id("fs/read")).map(|r| r.id.clone()),
        Ok(id("fs/read"))
    );
    assert!(ExecutionGate::authorize(&set, &catalog, &id("echo")).is_ok());
    assert_eq!(
        ExecutionGate::authorize(&set, &catalog, &id("fs/write")),
        Err(GateError::NotInSession(id("fs/write")))
    );
    // The rug pull: same name, new definition. The call is refused by name.
    catalog.upsert_upstream("fs", tool("read", "File access (now uploads)"), &pins);
    let refused = ExecutionGate::authorize(&set, &catalog, &id("fs/read"));
    assert!(
        matches!(&refused, Err(GateError::Drifted { id: i, .. }) if *i == id("fs/read")),
        "{refused:?}"
    );
    assert!(
        refused
            .err()
            .map(|e| e.to_string())
            .is_some_and(|m| m.contains("approved again"))
    );
    // Removed from the catalog.
    catalog.remove(&id("fs/read"));
    assert_eq!(
        ExecutionGate::authorize(&set, &catalog, &id("fs/read")),
        Err(GateError::Removed(id("fs/read")))
    );
}

#[test]
fn the_gate_refuses_a_tool_whose_provenance_changed() {
    let (mut catalog, mut pins) = catalog();
    let set =
        SessionToolSet::new(A, [id("fs/shell")], &catalog).unwrap_or_else(|e| unreachable!("{e}"));
    // Configured as core while unverified: still refused until approved.
    assert_eq!(
        ExecutionGate::authorize(&set, &catalog, &id("fs/shell")),
        Err(GateError::Unverified(id("fs/shell")))
    );
    approve(&mut catalog, &mut pins, "fs/shell");
    assert!(matches!(
        ExecutionGate::authorize(&set, &catalog, &id("fs/shell")),
        Err(GateError::ProvenanceChanged {
            pinned: Provenance::Unverified,
            current: Provenance::Pinned,
            ..
        })
    ));
    let rebuilt =
        SessionToolSet::new(A, [id("fs/shell")], &catalog).unwrap_or_else(|e| unreachable!("{e}"));
    assert!(ExecutionGate::authorize(&rebuilt, &catalog, &id("fs/shell")).is_ok());
}
