//! [`StopAutomaton`]: an Aho-Corasick automaton over a request's stop strings, built once per
//! request (off the engine thread, shared by its choices through [`crate::StopStrings`]).
//!
//! Its state after any text is the longest suffix of that text which is a prefix of some stop
//! string, so a matcher feeds it only the new bytes of each delta and holds back exactly
//! `depth(state)` bytes. Feeding `n` bytes takes at most `2 n` steps in total (one transition
//! per byte plus failure links, each of which shortens the suffix the bytes lengthened),
//! whatever the number or length of the stop strings: a long stop list costs memory bounded by
//! its bytes, not engine time per token.

/// One trie node: a prefix of some stop string.
#[derive(Clone, Debug)]
struct Node {
    /// Children by next byte, sorted by byte.
    children: Vec<(u8, u32)>,
    /// The node of the longest proper suffix of this prefix that is also a prefix.
    fail: u32,
    /// Bytes of this prefix.
    depth: u32,
    /// The longest stop string that ends this prefix: (its bytes, its lowest index in the list).
    out: Option<(u32, u32)>,
}

/// The automaton of one stop list (empty strings ignored; indices refer to the list given).
#[derive(Clone, Debug)]
pub struct StopAutomaton {
    nodes: Vec<Node>,
}

/// The root: the empty prefix.
pub const ROOT: u32 = 0;

impl StopAutomaton {
    pub fn new(stops: &[String]) -> Self {
        let mut nodes = vec![Node {
            children: Vec::new(),
            fail: ROOT,
            depth: 0,
            out: None,
        }];
        let mut own: Vec<Option<u32>> = vec![None];
        for (index, stop) in stops.iter().enumerate() {
            if stop.is_empty() {
                continue;
            }
            let mut at = ROOT as usize;
            for b in stop.bytes() {
                at = match child(&nodes[at], b) {
                    Some(c) => c as usize,
                    None => {
                        let id = nodes.len() as u32;
                        let depth = nodes[at].depth + 1;
                        let pos = nodes[at].children.partition_point(|&(x, _)| x < b);
                        nodes[at].children.insert(pos, (b, id));
                        nodes.push(Node {
                            children: Vec::new(),
                            fail: ROOT,
                            depth,
                            out: None,
                        });
                        own.push(None);
                        id as usize
                    }
                };
            }
            // The first of equal strings keeps its index.
            own[at].get_or_insert(index as u32);
        }
        // Breadth first, so a node's failure target (shallower) is finished before it.
        let mut queue = std::collections::VecDeque::from([ROOT]);
        while let Some(u) = queue.pop_front() {
            let children = nodes[u as usize].children.clone();
            for (b, v) in children {
                let fail = if u == ROOT {
                    ROOT
                } else {
                    let mut f = nodes[u as usize].fail;
                    loop {
                        if let Some(c) = child(&nodes[f as usize], b) {
                            break c;
                        }
                        if f == ROOT {
                            break ROOT;
                        }
                        f = nodes[f as usize].fail;
                    }
                };
                let v_us = v as usize;
                nodes[v_us].fail = fail;
                nodes[v_us].out = match own[v_us] {
                    Some(index) => Some((nodes[v_us].depth, index)),
                    None => nodes[fail as usize].out,
                };
                queue.push_back(v);
            }
        }
        StopAutomaton { nodes }
    }

    /// The state after `state` reads `b`; `steps` counts the transition and each failure link.
    pub fn step(&self, mut state: u32, b: u8, steps: &mut u64) -> u32 {
        loop {
            *steps += 1;
            let node = &self.nodes[state as usize];
            if let Some(c) = child(node, b) {
                return c;
            }
            if state == ROOT {
                return ROOT;
            }
            state = node.fail;
        }
    }

    /// Bytes of the prefix `state` stands for (what a matcher must hold back).
    pub fn depth(&self, state: u32) -> usize {
        self.nodes[state as usize].depth as usize
    }

    /// The longest stop string ending where `state` was reached: (its bytes, its index).
    pub fn found(&self, state: u32) -> Option<(usize, usize)> {
        self.nodes[state as usize]
            .out
            .map(|(len, index)| (len as usize, index as usize))
    }
}

fn child(node: &Node, b: u8) -> Option<u32> {
    node.children
        .binary_search_by_key(&b, |&(x, _)| x)
        .ok()
        .map(|i| node.children[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn finds_the_longest_stop_ending_first_and_counts_bounded_steps() {
        let a = StopAutomaton::new(&list(&["abcd", "bc", "", "bc", "xyz"]));
        let (mut s, mut steps) = (ROOT, 0);
        let mut found = None;
        for (i, b) in "zabc".bytes().enumerate() {
            s = a.step(s, b, &mut steps);
            if let Some(f) = a.found(s) {
                found = Some((i, f));
                break;
            }
        }
        // "bc" ends at byte 3; the first of the two equal strings is reported.
        assert_eq!(found, Some((3, (2, 1))));
        let text = "ab".repeat(500) + "abc";
        let (mut s, mut steps) = (ROOT, 0);
        let a = StopAutomaton::new(&list(&["ababababx", "abq", "bab"]));
        for b in text.bytes() {
            s = a.step(s, b, &mut steps);
        }
        assert!(steps <= 2 * text.len() as u64, "{steps}");
    }
}
