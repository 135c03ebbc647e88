// Test helpers for gather and scatter: random valid dimension numbers and a naive reference
// written from XLA's operation-semantics pseudo-code (one output or update element at a time).
//
//   std::mt19937_64 rng(7);
//   RandomGather g = MakeRandomGather(rng);   // operand, indices and output shapes + dnums
//   Literal want = ReferenceGather(operand, indices, g.dnums, g.output);
#ifndef TESSEL_CORE_TESTING_GATHER_SCATTER_H_
#define TESSEL_CORE_TESTING_GATHER_SCATTER_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "tessel/core/graph.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape.h"
#include "tessel/core/shape_inference.h"

namespace tessel::testing {

// A valid gather: shapes and dimension numbers (any index_vector_dim, batching dims, window
// sizes from 0 to the dim, dims of size 1 to `max_dim`).
struct RandomGather {
  Shape operand;
  Shape indices;
  Shape output;
  GatherDimensionNumbers dnums;
};

// `operand_dims`, when not empty, fixes the operand's dims (rank >= 1).
inline RandomGather MakeRandomGather(std::mt19937_64& rng, int64_t max_dim = 5,
                                     DType dtype = DType::kF32, DType index_type = DType::kS32,
                                     std::vector<int64_t> operand_dims = {}) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  RandomGather r;
  GatherDimensionNumbers& g = r.dnums;
  if (operand_dims.empty()) {
    for (int64_t d = uniform(1, 3); d > 0; --d) operand_dims.push_back(uniform(1, max_dim));
  }
  const int64_t operand_rank = static_cast<int64_t>(operand_dims.size());
  // Each operand dim: batching (rarely), indexed-and-collapsed, indexed window, plain window.
  std::vector<int64_t> indexed;
  for (int64_t d = 0; d < operand_rank; ++d) {
    int64_t kind = uniform(0, 5);
    if (kind == 0 && operand_rank > 1) {
      g.operand_batching_dims.push_back(d);
    } else if (kind <= 2) {
      g.collapsed_slice_dims.push_back(d);
      indexed.push_back(d);
    } else if (kind == 3) {
      indexed.push_back(d);
    }
  }
  if (indexed.empty() && g.operand_batching_dims.size() < static_cast<size_t>(operand_rank)) {
    for (int64_t d = 0; d < operand_rank; ++d) {
      if (std::find(g.operand_batching_dims.begin(), g.operand_batching_dims.end(), d) ==
          g.operand_batching_dims.end()) {
        indexed.push_back(d);
        break;
      }
    }
  }
  std::shuffle(indexed.begin(), indexed.end(), rng);
  g.start_index_map = indexed;
  g.slice_sizes.assign(operand_rank, 1);
  for (int64_t d = 0; d < operand_rank; ++d) {
    bool window = std::find(g.collapsed_slice_dims.begin(), g.collapsed_slice_dims.end(), d) ==
                      g.collapsed_slice_dims.end() &&
                  std::find(g.operand_batching_dims.begin(), g.operand_batching_dims.end(), d) ==
                      g.operand_batching_dims.end();
    if (window) g.slice_sizes[d] = uniform(0, 4) == 0 ? 0 : uniform(1, operand_dims[d]);
  }
  // Indices: the batching dims and 0-2 extra batch dims in random order, then the index vector
  // inserted at a random position (or implicit at the end when it has one entry).
  std::vector<int64_t> batch_sizes;
  std::vector<int64_t> batch_role;  // >= 0: operand batching dim it pairs with; -1: free
  for (int64_t d : g.operand_batching_dims) {
    batch_sizes.push_back(operand_dims[d]);
    batch_role.push_back(d);
  }
  for (int64_t extra = uniform(0, 2); extra > 0; --extra) {
    batch_sizes.push_back(uniform(1, max_dim));
    batch_role.push_back(-1);
  }
  std::vector<size_t> order(batch_sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const int64_t batch_rank = static_cast<int64_t>(order.size());
  const int64_t vector_size = static_cast<int64_t>(indexed.size());
  bool implicit = vector_size == 1 && uniform(0, 1) == 0;
  g.index_vector_dim = implicit ? batch_rank : uniform(0, batch_rank);
  std::vector<int64_t> index_dims;
  std::vector<int64_t> batching_pos(g.operand_batching_dims.size(), -1);
  for (int64_t i = 0; i <= batch_rank; ++i) {
    if (i == g.index_vector_dim && !implicit) index_dims.push_back(vector_size);
    if (i == batch_rank) break;
    size_t b = order[i];
    if (batch_role[b] >= 0) {
      auto it =
          std::find(g.operand_batching_dims.begin(), g.operand_batching_dims.end(), batch_role[b]);
      batching_pos[it - g.operand_batching_dims.begin()] = static_cast<int64_t>(index_dims.size());
    }
    index_dims.push_back(batch_sizes[b]);
  }
  g.start_indices_batching_dims = batching_pos;
  const int64_t window_rank = operand_rank - static_cast<int64_t>(g.collapsed_slice_dims.size()) -
                              static_cast<int64_t>(g.operand_batching_dims.size());
  std::vector<int64_t> out_dims(batch_rank + window_rank);
  for (int64_t o = 0; o < batch_rank + window_rank; ++o) out_dims[o] = o;
  std::shuffle(out_dims.begin(), out_dims.end(), rng);
  g.offset_dims.assign(out_dims.begin(), out_dims.begin() + window_rank);
  std::sort(g.offset_dims.begin(), g.offset_dims.end());
  r.operand = Shape(dtype, operand_dims);
  r.indices = Shape(index_type, index_dims);
  OpAttributes attrs;
  attrs.gather = g;
  r.output = InferShape(Opcode::kGather, {&r.operand, &r.indices}, attrs, std::nullopt).value();
  return r;
}

// Random start indices for `operand`: mostly in range, some up to 3 past either end.
inline Literal RandomIndices(std::mt19937_64& rng, const Shape& indices, const Shape& operand) {
  int64_t max_dim = 1;
  for (int64_t d : operand.dims()) max_dim = std::max(max_dim, d);
  Literal out(indices);
  for (int64_t i = 0; i < indices.num_elements(); ++i) {
    int64_t v = std::uniform_int_distribution<int64_t>(0, max_dim - 1)(rng);
    if (std::uniform_int_distribution<int>(0, 7)(rng) == 0) {
      v = std::uniform_int_distribution<int64_t>(-3, max_dim + 2)(rng);
    }
    out.SetFromDouble(i, static_cast<double>(v));
  }
  return out;
}

namespace internal_gs {
inline std::vector<int64_t> Unravel(int64_t linear, const std::vector<int64_t>& dims) {
  std::vector<int64_t> index(dims.size());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    index[d] = dims[d] == 0 ? 0 : linear % dims[d];
    linear = dims[d] == 0 ? 0 : linear / dims[d];
  }
  return index;
}
inline int64_t Ravel(const std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  int64_t linear = 0;
  for (size_t d = 0; d < dims.size(); ++d) linear = linear * dims[d] + index[d];
  return linear;
}
inline bool Has(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}
// XLA's pseudo-code: the operand index (unclamped start, per dim) and the window offset of one
// output element `out` of a gather.
inline void GatherElement(const std::vector<int64_t>& out, const Literal& indices,
                          const GatherDimensionNumbers& g, int64_t operand_rank,
                          std::vector<int64_t>& start, std::vector<int64_t>& offset) {
  std::vector<int64_t> batch;  // G: the output's batch dims in order
  std::vector<int64_t> window;
  for (size_t o = 0; o < out.size(); ++o) {
    (Has(g.offset_dims, static_cast<int64_t>(o)) ? window : batch).push_back(out[o]);
  }
  const int64_t indices_rank = indices.shape().rank();
  start.assign(operand_rank, 0);
  for (size_t k = 0; k < g.start_index_map.size(); ++k) {
    std::vector<int64_t> at;
    size_t next = 0;
    for (int64_t d = 0; d < indices_rank; ++d) {
      at.push_back(d == g.index_vector_dim ? static_cast<int64_t>(k) : batch[next++]);
    }
    start[g.start_index_map[k]] =
        static_cast<int64_t>(indices.GetAsDouble(Ravel(at, indices.shape().dims())));
  }
  for (size_t i = 0; i < g.operand_batching_dims.size(); ++i) {
    int64_t d = g.start_indices_batching_dims[i];
    start[g.operand_batching_dims[i]] = batch[d - (d > g.index_vector_dim ? 1 : 0)];
  }
  offset.assign(operand_rank, 0);
  size_t next = 0;
  for (int64_t d = 0; d < operand_rank; ++d) {
    if (Has(g.collapsed_slice_dims, d) || Has(g.operand_batching_dims, d)) continue;
    offset[d] = window[next++];
  }
}
}  // namespace internal_gs

// gather, one output element at a time, starts clamped into [0, dim - slice_size].
inline Literal ReferenceGather(const Literal& operand, const Literal& indices,
                               const GatherDimensionNumbers& g, const Shape& output) {
  Literal out(output);
  const std::vector<int64_t>& od = operand.shape().dims();
  std::vector<int64_t> start, offset;
  for (int64_t i = 0; i < output.num_elements(); ++i) {
    internal_gs::GatherElement(internal_gs::Unravel(i, output.dims()), indices, g,
                               operand.shape().rank(), start, offset);
    std::vector<int64_t> at(od.size());
    for (size_t d = 0; d < od.size(); ++d) {
      at[d] = std::clamp<int64_t>(start[d], 0, od[d] - g.slice_sizes[d]) + offset[d];
    }
    out.SetFromDouble(i, operand.GetAsDouble(internal_gs::Ravel(at, od)));
  }
  return out;
}

// scatter with `add` (or overwrite), update elements in row-major order; an update whose whole
// window does not fit inside the operand is skipped.
inline Literal ReferenceScatter(const Literal& operand, const Literal& indices,
                                const Literal& updates, const ScatterDimensionNumbers& s,
                                bool overwrite) {
  Literal out = operand;
  GatherDimensionNumbers g = ScatterAsGather(s, operand.shape(), updates.shape());
  const std::vector<int64_t>& od = operand.shape().dims();
  std::vector<int64_t> start, offset;
  for (int64_t i = 0; i < updates.shape().num_elements(); ++i) {
    internal_gs::GatherElement(internal_gs::Unravel(i, updates.shape().dims()), indices, g,
                               operand.shape().rank(), start, offset);
    bool inside = true;
    std::vector<int64_t> at(od.size());
    for (size_t d = 0; d < od.size(); ++d) {
      inside = inside && start[d] >= 0 && start[d] + g.slice_sizes[d] <= od[d];
      at[d] = start[d] + offset[d];
    }
    if (!inside) continue;
    int64_t j = internal_gs::Ravel(at, od);
    double v = updates.GetAsDouble(i);
    out.SetFromDouble(j, overwrite ? v : out.GetAsDouble(j) + v);
  }
  return out;
}

}  // namespace tessel::testing

#endif  // TESSEL_CORE_TESTING_GATHER_SCATTER_H_
