//! Rejecting grammars that can never finish: whether the compiled grammar's start rule can
//! derive a finite string (the classic "productive symbol" fixpoint over its rules).
//!
//! A grammar such as Lark `start: "a" start`, or a JSON schema whose required property refers
//! back to itself, lets every prefix continue but never accepts: a request under it would run
//! to `max_tokens` every time. The check is conservative: lexemes (regular expressions) and
//! nested grammars count as finishing, and parametric grammars are not checked, so a grammar
//! it rejects truly has no finite accepted string, while some empty languages hidden inside a
//! lexeme are left to the first-mask check.

use std::collections::HashSet;

use llguidance::earley::{CGrammar, CSymIdx};

/// `Err(rule name)` when no finite string satisfies `grammar`'s start rule.
pub(crate) fn check_terminates(grammar: &CGrammar) -> Result<(), String> {
    if grammar.parametric() {
        return Ok(());
    }
    let symbols = reachable(grammar);
    let mut productive: HashSet<CSymIdx> = symbols
        .iter()
        .copied()
        .filter(|&s| finishes_alone(grammar, s))
        .collect();
    loop {
        let before = productive.len();
        for &sym in &symbols {
            if productive.contains(&sym) {
                continue;
            }
            let derives = grammar.rules_of(sym).iter().any(|&rule| {
                let (rhs, _, _) = grammar.rule_rhs(rule);
                rhs.iter().all(|s| productive.contains(s))
            });
            if derives {
                productive.insert(sym);
            }
        }
        if productive.len() == before {
            break;
        }
    }
    let start = grammar.start();
    if productive.contains(&start) {
        Ok(())
    } else {
        Err(grammar.sym_data(start).name.clone())
    }
}

/// A symbol that finishes without looking at its rules: a lexeme, a nested grammar, or one
/// that may match the empty string.
fn finishes_alone(grammar: &CGrammar, sym: CSymIdx) -> bool {
    let data = grammar.sym_data(sym);
    data.is_terminal || data.is_nullable || data.lexeme.is_some() || data.gen_grammar.is_some()
}

/// Every symbol reachable from the start rule.
fn reachable(grammar: &CGrammar) -> Vec<CSymIdx> {
    let mut seen: HashSet<CSymIdx> = HashSet::new();
    let mut stack = vec![grammar.start()];
    let mut order = Vec::new();
    while let Some(sym) = stack.pop() {
        if !seen.insert(sym) {
            continue;
        }
        order.push(sym);
        for &rule in grammar.rules_of(sym) {
            let (rhs, _, _) = grammar.rule_rhs(rule);
            stack.extend(rhs.iter().copied().filter(|s| !seen.contains(s)));
        }
    }
    order
}
