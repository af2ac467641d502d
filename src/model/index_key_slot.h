#pragma once

// Which kv source's index-K cache an index source scores against (model.md §7.5 "Which keys an
// index source scores against (settled)").
//
// The model (the default, the clean rule): always its own kv_source_layer's, in prefill, chunked
// prefill and decode alike, so decode ≡ prefill.
//
// The official reference's defect (ExecContext::official_index_key_slot, off by default, for
// comparisons with the official code): it keeps one "published index keys" slot per request,
// which a kv source republishes only when it completes a compressed group in this forward. An
// index source whose own kv source completed nothing in this forward scores against the slot —
// the keys of the kv source that published last — reading that cache's first (p + 1) // ratio
// rows as if they were its own entries. We define it per request per forward: a forward of a
// request covers positions [start_pos, start_pos + num_tokens), and a kv source of ratio r
// completes a group in it iff (start_pos + num_tokens) / r > start_pos / r. A one-shot prefill
// completes every source it can (nothing changes); decode steps and chunks shorter than r that
// close no group are affected. In the released plan that is decode at even positions: layers 2,
// 8, 14 score against layer 20's keys of the previous step.

#include <cstdint>

#include "config/layer_plan.h"

namespace dsv41 {

// Whether a kv source of ratio `ratio` completes a group in the forward [start_pos, start_pos +
// num_tokens): some position p in it has p mod ratio = ratio − 1.
bool CompletesGroup(int32_t ratio, int32_t start_pos, int32_t num_tokens);

// The kv source layer whose index keys index source `role` scores against for one request's
// forward [start_pos, start_pos + num_tokens). Without `official_slot`: *role.kv_source_layer.
// With it, when that source completes nothing in the forward: the last publisher — the latest kv
// source before `role` in plan order that completes a group in this forward, else the latest kv
// source in plan order that completed one at position start_pos − 1 (the end of the previous
// forward) — provided it holds at least (start_pos + num_tokens) / role.ratio entries; otherwise
// (nothing published yet, or too few rows) its own source.
//
// Stateless: the slot's content is a function of the plan and the positions. Within the forward,
// the layers before `role` ran at the same positions. For the previous forward, the last
// publisher is the latest kv source in plan order that completed anything in it; when the plan's
// last kv source has ratio 1 (the released plan's layer 20, the tiny preset's layer 6) it
// completes at every position, so "completed at start_pos − 1" finds exactly that layer, whatever
// the previous forward's length. For plans whose last kv source has ratio > 1 the lookup at
// start_pos − 1 is exact when the previous forward was one token (decode after decode, the
// official reference's only multi-forward path).
int32_t IndexKeySourceLayer(const LayerPlan& plan, const LayerRole& role, int32_t start_pos,
                            int32_t num_tokens, bool official_slot);

}  // namespace dsv41
