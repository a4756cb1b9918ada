//! Fair sharing of running slots between submission groups (the choices of one API request
//! form one group; a request submitted alone is its own group).
//!
//! The policy, which the scheduler applies every step:
//! - **Fair share.** With `G` groups holding live (running or waiting) requests, a group's
//!   share is `max(1, max_num_seqs / G)` running slots. A group alone may take every slot.
//! - **Admission.** The next waiting request to admit is the front-most one of the group with
//!   the fewest running requests (ties: queue order, so single-request groups are admitted
//!   first come, first served, and preempted requests, which return to the front, first).
//! - **Preemption for fairness.** When the next request to admit belongs to a group below its
//!   share and cannot be admitted (no free slot, or too few free blocks), the newest running
//!   request of the group furthest above its share is preempted (recomputed later), until it
//!   can be or no group is above its share; that request is admitted in the same step, so
//!   slots change hands one admission per step until every waiting group holds its share. One
//!   request with many choices holds every slot while alone, and gives up slots as soon as
//!   other requests wait: nobody starves behind it.
//! - **Preemption for blocks.** When a running request needs blocks that are not free, the
//!   victim is the newest not-yet-scheduled request of the group with the most running
//!   requests: a group with many running sequences pays for its own growth first.
//!
//! A group's requests keep their order among themselves; the oldest running request is never
//! the victim while another running request can be (see `block_victim`), so with no new
//! arrivals every request still finishes.

use std::collections::{HashMap, VecDeque};

use oxllm_core::ReqId;

use crate::request::Request;

/// Running requests per group.
pub(crate) type GroupCounts = HashMap<ReqId, usize>;

/// A group's share of `max_num_seqs` slots when `num_groups` groups have live requests.
pub(crate) fn fair_share(max_num_seqs: usize, num_groups: usize) -> usize {
    (max_num_seqs / num_groups.max(1)).max(1)
}

pub(crate) fn running_counts(running: &[ReqId], requests: &HashMap<ReqId, Request>) -> GroupCounts {
    let mut counts = GroupCounts::new();
    for id in running {
        if let Some(r) = requests.get(id) {
            *counts.entry(r.group()).or_default() += 1;
        }
    }
    counts
}

/// Groups with a running or waiting request.
pub(crate) fn num_live_groups(requests: &HashMap<ReqId, Request>) -> usize {
    let mut groups: Vec<ReqId> = requests.values().map(Request::group).collect();
    groups.sort_unstable();
    groups.dedup();
    groups.len()
}

/// The waiting request to admit next, as (position in `waiting`, id): the front-most request
/// of the group with the fewest running requests; ties go to the earlier position.
pub(crate) fn next_waiting(
    waiting: &VecDeque<ReqId>,
    requests: &HashMap<ReqId, Request>,
    counts: &GroupCounts,
) -> Option<(usize, ReqId)> {
    let mut best: Option<(usize, usize, ReqId)> = None;
    for (pos, &id) in waiting.iter().enumerate() {
        let Some(r) = requests.get(&id) else { continue };
        let running = counts.get(&r.group()).copied().unwrap_or(0);
        if best.is_none_or(|(n, _, _)| running < n) {
            best = Some((running, pos, id));
            if running == 0 {
                break;
            }
        }
    }
    best.map(|(_, pos, id)| (pos, id))
}

/// The request to preempt for fairness, as a position in `running`: the newest running
/// request of the group with the most running requests, if that group runs more than `share`.
pub(crate) fn share_victim(
    running: &[ReqId],
    requests: &HashMap<ReqId, Request>,
    counts: &GroupCounts,
    share: usize,
) -> Option<usize> {
    let (pos, count) = newest_of_largest(running, requests, counts)?;
    (count > share).then_some(pos)
}

/// The request to preempt for blocks among `candidates` (running requests not yet scheduled
/// this step, oldest first), as a position in `candidates`: the newest one of the group with
/// the most running requests (counted over every running request). So the oldest running
/// request (the first candidate when the step starts) is chosen only when it is the only
/// candidate: its group outranks another only by running more requests, and then a later
/// (newer) candidate of its own group ranks as high.
pub(crate) fn block_victim(
    candidates: &[ReqId],
    requests: &HashMap<ReqId, Request>,
    counts: &GroupCounts,
) -> Option<usize> {
    newest_of_largest(candidates, requests, counts).map(|(pos, _)| pos)
}

/// (position, its group's running count) of the entry maximising (group count, position).
fn newest_of_largest(
    ids: &[ReqId],
    requests: &HashMap<ReqId, Request>,
    counts: &GroupCounts,
) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    for (pos, id) in ids.iter().enumerate() {
        let count = requests
            .get(id)
            .and_then(|r| counts.get(&r.group()))
            .copied()
            .unwrap_or(0);
        if best.is_none_or(|(_, c)| count >= c) {
            best = Some((pos, count));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reqs(groups: &[(ReqId, ReqId)]) -> HashMap<ReqId, Request> {
        groups
            .iter()
            .map(|&(id, g)| (id, Request::new(id, vec![1, 2], 4, vec![]).with_group(g)))
            .collect()
    }

    #[test]
    fn share_is_at_least_one_slot() {
        assert_eq!(fair_share(64, 1), 64);
        assert_eq!(fair_share(64, 2), 32);
        assert_eq!(fair_share(4, 9), 1);
        assert_eq!(fair_share(4, 0), 4);
    }

    #[test]
    fn admission_prefers_the_least_served_group_then_queue_order() {
        // Group 10 runs 1, 2 and 3; 4 and 5 of it wait before 6 (alone) and 7 (alone).
        let r = reqs(&[(1, 10), (2, 10), (3, 10), (4, 10), (5, 10), (6, 6), (7, 7)]);
        let counts = running_counts(&[1, 2, 3], &r);
        assert_eq!(counts[&10], 3);
        let waiting: VecDeque<ReqId> = [4, 5, 6, 7].into_iter().collect();
        assert_eq!(next_waiting(&waiting, &r, &counts), Some((2, 6)));
        // Nobody runs: plain queue order.
        let none = GroupCounts::new();
        assert_eq!(next_waiting(&waiting, &r, &none), Some((0, 4)));
        assert_eq!(num_live_groups(&r), 3);
    }

    #[test]
    fn victims_come_from_the_largest_group_newest_first() {
        let r = reqs(&[(1, 1), (2, 20), (3, 20), (4, 4), (5, 20)]);
        let running = [1, 2, 3, 4, 5];
        let counts = running_counts(&running, &r);
        assert_eq!(share_victim(&running, &r, &counts, 1), Some(4));
        assert_eq!(share_victim(&running, &r, &counts, 3), None);
        // Among the candidates [3, 4]: 3 belongs to the 3-strong group.
        assert_eq!(block_victim(&running[2..4], &r, &counts), Some(0));
        assert_eq!(block_victim(&running[2..], &r, &counts), Some(2));
        // Equal groups: the newest.
        let r = reqs(&[(1, 1), (2, 2), (3, 3)]);
        let counts = running_counts(&[1, 2, 3], &r);
        assert_eq!(block_victim(&[1, 2, 3], &r, &counts), Some(2));
        assert_eq!(block_victim(&[1], &r, &counts), Some(0));
        assert_eq!(block_victim(&[], &r, &counts), None);
    }
}
