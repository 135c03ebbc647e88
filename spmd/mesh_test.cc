#include "tessel/spmd/mesh.h"

#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessel/mesh/topology/topology.h"

namespace tessel::spmd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), int64_t{0});
  return ids;
}

// ----------------------------------------------------------------------------------------------
// Mesh.

TEST(MeshTest, TorchXlaDocExample) {
  // torch_xla: Mesh(np.array(range(8)), (4, 2), ('x', 'y')).
  absl::StatusOr<Mesh> mesh = Mesh::Create(Iota(8), {4, 2}, {"x", "y"});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->logical_mesh().ToString(), "[[0, 1], [2, 3], [4, 5], [6, 7]]");
  EXPECT_THAT(mesh->shape(), ElementsAre(Pair("x", 4), Pair("y", 2)));
  EXPECT_EQ(mesh->size(), 8);
  EXPECT_EQ(mesh->rank(), 2);
  EXPECT_EQ(*mesh->AxisIndex("y"), 1);
  EXPECT_EQ(mesh->axis_size(0), 4);
  EXPECT_EQ(mesh->DeviceAt({3, 1}), 7);
  EXPECT_THAT(*mesh->CoordinateOf(5), ElementsAre(2, 1));
  EXPECT_FALSE(mesh->CoordinateOf(8).has_value());
  EXPECT_EQ(mesh->AxesToString(), "[\"x\"=4, \"y\"=2]");
  EXPECT_EQ(mesh->ToString(), "Mesh([\"x\"=4, \"y\"=2], [[0, 1], [2, 3], [4, 5], [6, 7]])");
}

TEST(MeshTest, CustomOrderAndUnnamedAxes) {
  absl::StatusOr<Mesh> mesh = Mesh::Create({7, 6, 5, 4, 3, 2, 1, 0}, {2, 4});
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(mesh->logical_mesh().ToString(), "[[7, 6, 5, 4], [3, 2, 1, 0]]");
  EXPECT_THAT(mesh->shape(), ElementsAre(Pair("0", 2), Pair("1", 4)));
  EXPECT_EQ(mesh->AxesToString(), "[0=2, 1=4]");
  absl::StatusOr<int64_t> unknown = mesh->AxisIndex("x");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(), "unknown mesh axis \"x\"; mesh has axes [0=2, 1=4]");
}

TEST(MeshTest, DefaultIsOneDevice) {
  Mesh mesh;
  EXPECT_EQ(mesh.size(), 1);
  EXPECT_THAT(mesh.mesh_shape(), ElementsAre(1));
  EXPECT_EQ(mesh, *Mesh::Create({0}, {1}));
}

TEST(MeshTest, ValidationErrors) {
  auto error = [](std::vector<int64_t> ids, std::vector<int64_t> shape,
                  std::vector<std::string> names = {}) {
    absl::StatusOr<Mesh> mesh = Mesh::Create(std::move(ids), std::move(shape), std::move(names));
    EXPECT_FALSE(mesh.ok());
    return mesh.status();
  };
  absl::Status count = error(Iota(6), {4, 2});
  EXPECT_EQ(count.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(count.message(), "mesh_shape [4,2] holds 8 devices but 6 device ids were given");
  absl::Status repeated = error({0, 1, 1, 3}, {2, 2});
  EXPECT_EQ(repeated.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(repeated.message(), HasSubstr("device id 1 appears twice"));
  absl::Status range = error({0, 1, 2, 4}, {2, 2});
  EXPECT_EQ(range.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(range.message(), HasSubstr("device id 4 is outside the mesh of 4 devices"));
  EXPECT_EQ(error({0, -1}, {2}).code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(error(Iota(4), {2, 2}, {"x"}).message(),
              HasSubstr("1 axis names [x] for 2 mesh axes [2,2]"));
  EXPECT_THAT(error(Iota(4), {2, 2}, {"x", "x"}).message(),
              HasSubstr("axis name \"x\" appears twice"));
  EXPECT_THAT(error(Iota(4), {2, 2}, {"x", ""}).message(), HasSubstr("empty"));
  EXPECT_EQ(error(Iota(4), {2, 2}, {"x", std::string("d\0ta", 4)}).message(),
            "axis name \"d\\x00ta\" holds a control character (a byte below 0x20 or 0x7f)");
  EXPECT_THAT(error(Iota(4), {2, 2}, {"x", "a\tb"}).message(), HasSubstr("control character"));
  EXPECT_THAT(error({}, {}).message(), HasSubstr("at least one axis"));
  EXPECT_THAT(error({}, {2, 0}).message(), HasSubstr("axis of size 0"));
  EXPECT_THAT(error({}, {int64_t{1} << 32, int64_t{1} << 32}).message(),
              HasSubstr("more than 2^40 devices"));
}

// ----------------------------------------------------------------------------------------------
// create_device_mesh for an n-d torus.

// The mesh JAX would build from `expected_assignment` (physical axes per logical axis): the
// physical iota transposed so the assigned axes come in order, reshaped.
DeviceArray FromAssignment(const std::vector<int64_t>& physical,
                           const std::vector<int64_t>& mesh_shape,
                           const std::vector<std::vector<int64_t>>& assignment) {
  std::vector<int64_t> perm;
  for (const auto& axes : assignment) perm.insert(perm.end(), axes.begin(), axes.end());
  return DeviceArray::Iota(physical).Transpose(perm).Reshape(mesh_shape);
}

struct TorusCase {
  std::vector<int64_t> physical;
  std::vector<int64_t> mesh_shape;
  std::vector<std::vector<int64_t>> assignment;
};

// The expected assignments of JAX's mesh_utils_test.test_create_device_mesh_for_nd_torus.
TEST(CreateDeviceMeshTest, NdTorusMatchesJaxAssignments) {
  const std::vector<TorusCase> cases = {
      {{2, 2, 1}, {1, 1, 4}, {{}, {}, {0, 1, 2}}},  {{2, 2, 4}, {1, 4, 4}, {{}, {2}, {0, 1}}},
      {{4, 4, 4}, {1, 16, 4}, {{}, {1, 2}, {0}}},   {{4, 4, 8}, {1, 16, 8}, {{}, {0, 1}, {2}}},
      {{4, 4, 8}, {1, 8, 16}, {{}, {2}, {0, 1}}},   {{4, 4, 8}, {16, 8, 1}, {{0, 1}, {2}, {}}},
      {{4, 8, 8}, {1, 32, 8}, {{}, {0, 2}, {1}}},   {{8, 8, 8}, {1, 64, 8}, {{}, {1, 2}, {0}}},
      {{8, 8, 16}, {1, 64, 16}, {{}, {0, 1}, {2}}}, {{8, 8, 1}, {8, 8}, {{1}, {0, 2}}},
  };
  for (const TorusCase& c : cases) {
    DeviceArray physical = DeviceArray::Iota(c.physical);
    absl::StatusOr<DeviceArray> mesh = CreateDeviceMeshForNdTorus(physical, c.mesh_shape, false);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    EXPECT_EQ(*mesh, FromAssignment(c.physical, c.mesh_shape, c.assignment))
        << "physical " << DeviceArray::Iota(c.physical).dims().size() << "-d, mesh "
        << mesh->ToString();
  }
}

TEST(CreateDeviceMeshTest, SplittingPhysicalAxes) {
  // 2x2x4 from a 4x4 torus needs a split: JAX's docstring example. The size-4 axis takes the
  // whole physical axis 0; the two size-2 axes split physical axis 1 (the first one major).
  DeviceArray physical = DeviceArray::Iota({4, 4});
  absl::StatusOr<DeviceArray> no_split = CreateDeviceMeshForNdTorus(physical, {2, 2, 4}, false);
  EXPECT_EQ(no_split.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_split.status().message(), HasSubstr("whole axes"));
  absl::StatusOr<DeviceArray> split = CreateDeviceMeshForNdTorus(physical, {2, 2, 4}, true);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->ToString(),
            "[[[0, 4, 8, 12], [1, 5, 9, 13]], [[2, 6, 10, 14], [3, 7, 11, 15]]]");
  // CreateDeviceMesh tries without splitting first, then splits.
  EXPECT_EQ(*CreateDeviceMesh({2, 2, 4}, physical), *split);
  EXPECT_EQ(*CreateDeviceMesh({4, 4}, physical),
            *CreateDeviceMeshForNdTorus(physical, {4, 4}, false));
  // A 1-D split: 6 chips in a line as 2x3.
  EXPECT_EQ(CreateDeviceMesh({2, 3}, DeviceArray::Iota({6}))->ToString(), "[[0, 1, 2], [3, 4, 5]]");
}

TEST(CreateDeviceMeshTest, SplitKeepsEveryDeviceOnce) {
  for (const auto& [physical, logical] :
       std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{4, 4, 4}, {2, 8, 4}},
           {{8, 8}, {2, 2, 16}},
           {{4, 6}, {3, 8}},
           {{2, 3, 4}, {6, 4}},
           {{16}, {4, 2, 2}},
       }) {
    absl::StatusOr<DeviceArray> mesh = CreateDeviceMesh(logical, DeviceArray::Iota(physical));
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    EXPECT_EQ(mesh->dims(), logical);
    std::vector<int64_t> ids = mesh->device_ids();
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids, Iota(Product(physical)));
  }
}

TEST(CreateDeviceMeshTest, CountMismatch) {
  absl::StatusOr<DeviceArray> mesh = CreateDeviceMesh({1, 8, 1}, DeviceArray::Iota({2, 2}));
  EXPECT_EQ(mesh.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mesh.status().message(),
            "number of devices 4 must equal the product of mesh_shape [1,8,1]");
}

// ----------------------------------------------------------------------------------------------
// HybridMesh.

mesh::Topology TwoSlices() {
  absl::StatusOr<mesh::Topology> t = mesh::MakeUniformTopology(2, {2, 2, 1}, 2);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(HybridMeshTest, TwoSlicesOf2x2) {
  // The torch_xla docstring example (2 slices, ici (1,4,1), dcn (2,1,1)) on two 2x2 slices.
  absl::StatusOr<HybridMesh> mesh =
      HybridMesh::Create({1, 4, 1}, {2, 1, 1}, {"data", "fsdp", "tensor"}, TwoSlices());
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_THAT(mesh->shape(), ElementsAre(Pair("data", 2), Pair("fsdp", 4), Pair("tensor", 1)));
  // Devices are numbered x fastest: slice 0 has 0=(0,0) 1=(1,0) 2=(0,1) 3=(1,1). Its physical
  // mesh [x][y] is [[0, 2], [1, 3]]; fsdp takes both physical axes.
  EXPECT_EQ(mesh->logical_mesh().ToString(), "[[[0], [2], [1], [3]], [[4], [6], [5], [7]]]");
  EXPECT_THAT(mesh->ici_mesh_shape(), ElementsAre(1, 4, 1));
  EXPECT_THAT(mesh->dcn_mesh_shape(), ElementsAre(2, 1, 1));
  // The same slices, 2x2 inside each slice and the slices stacked along axis 0.
  absl::StatusOr<HybridMesh> square = HybridMesh::Create({2, 2}, {2, 1}, {}, TwoSlices());
  ASSERT_TRUE(square.ok()) << square.status();
  EXPECT_EQ(square->logical_mesh().ToString(), "[[0, 1], [2, 3], [4, 5], [6, 7]]");
  // Slices side by side along axis 1.
  absl::StatusOr<HybridMesh> wide = HybridMesh::Create({2, 2}, {1, 2}, {}, TwoSlices());
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->logical_mesh().ToString(), "[[0, 1, 4, 5], [2, 3, 6, 7]]");
}

// torch_xla test_hybrid_mesh: two v4-8 slices whose device ordinals do not follow the
// coordinates. Expected mesh [[2, 1], [0, 3], [4, 7], [6, 5]].
TEST(HybridMeshTest, TorchXlaTestHybridMesh) {
  const std::string json = R"({
    "device_spec": {"peak_tflops": {"bf16": 1}, "hbm_bytes": 1, "hbm_bandwidth_gbytes_per_s": 1},
    "ici": {"kind": "torus", "bandwidth_gbps": 1, "latency_us": 1},
    "dcn": {"bandwidth_gbps": 1, "latency_us": 1},
    "slices": [
      {"shape": [2, 2, 1], "wraparound": [false, false, false], "hosts": 1, "devices_per_host": 4},
      {"shape": [2, 2, 1], "wraparound": [false, false, false], "hosts": 1, "devices_per_host": 4}
    ],
    "devices": [
      {"id": 2, "slice": 0, "host": 0, "coords": [0, 0, 0]},
      {"id": 1, "slice": 0, "host": 0, "coords": [1, 0, 0]},
      {"id": 0, "slice": 0, "host": 0, "coords": [0, 1, 0]},
      {"id": 3, "slice": 0, "host": 0, "coords": [1, 1, 0]},
      {"id": 4, "slice": 1, "host": 1, "coords": [0, 0, 0]},
      {"id": 7, "slice": 1, "host": 1, "coords": [1, 0, 0]},
      {"id": 6, "slice": 1, "host": 1, "coords": [0, 1, 0]},
      {"id": 5, "slice": 1, "host": 1, "coords": [1, 1, 0]}
    ]})";
  absl::StatusOr<mesh::Topology> topology = mesh::ParseTopology(json, "<test>");
  ASSERT_TRUE(topology.ok()) << topology.status();
  absl::StatusOr<HybridMesh> mesh = HybridMesh::Create({2, 2}, {2, 1}, {}, *topology);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->logical_mesh().ToString(), "[[2, 1], [0, 3], [4, 7], [6, 5]]");
}

TEST(HybridMeshTest, SingleSlice) {
  absl::StatusOr<mesh::Topology> topology = mesh::MakeUniformTopology(1, {4, 2}, 2);
  ASSERT_TRUE(topology.ok()) << topology.status();
  // Physical [x][y] holds x + 4y; the size-4 axis takes x, the size-2 axis y.
  absl::StatusOr<HybridMesh> mesh = HybridMesh::Create({2, 4}, {}, {"data", "model"}, *topology);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->logical_mesh().ToString(), "[[0, 1, 2, 3], [4, 5, 6, 7]]");
  EXPECT_THAT(mesh->dcn_mesh_shape(), ElementsAre(1, 1));
  // dcn all ones is the same as none.
  EXPECT_EQ(*HybridMesh::Create({2, 4}, {1, 1}, {"data", "model"}, *topology), *mesh);
  // A split: 8 chips of a 4x2 slice as 2x2x2.
  absl::StatusOr<HybridMesh> split = HybridMesh::Create({2, 2, 2}, {}, {}, *topology);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->size(), 8);
}

TEST(HybridMeshTest, TorchXlaErrors) {
  mesh::Topology two = TwoSlices();
  absl::StatusOr<mesh::Topology> one = mesh::MakeUniformTopology(1, {2, 2, 1}, 1);
  ASSERT_TRUE(one.ok());
  auto error = [](absl::StatusOr<HybridMesh> mesh) {
    EXPECT_FALSE(mesh.ok());
    EXPECT_EQ(mesh.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(mesh.status().message());
  };
  EXPECT_EQ(error(HybridMesh::Create({1, 4, 1}, {}, {}, two)),
            "provide dcn_mesh_shape to create a mesh for multislice (the topology has 2 slices)");
  EXPECT_EQ(error(HybridMesh::Create({1, 4, 1}, {1, 1, 1}, {}, two)),
            "provide dcn_mesh_shape to create a mesh for multislice (the topology has 2 slices)");
  EXPECT_EQ(error(HybridMesh::Create({1, 2, 1}, {2, 1, 1}, {}, *one)),
            "invalid dcn_mesh_shape [2,1,1] for a single slice mesh");
  EXPECT_EQ(error(HybridMesh::Create({1, 4, 1}, {4, 1, 1}, {}, two)),
            "number of slices 2 must equal the product of dcn_mesh_shape [4,1,1] = 4");
  EXPECT_EQ(error(HybridMesh::Create({1, 8, 1}, {2, 1, 1}, {}, two)),
            "number of devices 4 in slice 0 must equal the product of ici_mesh_shape [1,8,1] = 8");
  EXPECT_EQ(error(HybridMesh::Create({1, 8}, {}, {}, *one)),
            "number of devices 4 must equal the product of ici_mesh_shape [1,8] = 8");
  EXPECT_THAT(error(HybridMesh::Create({1, 4, 1}, {2, 1}, {}, two)),
              HasSubstr("dcn_mesh_shape [2,1] has 2 axes but ici_mesh_shape [1,4,1] has 3"));
  EXPECT_THAT(error(HybridMesh::Create({}, {}, {}, two)), HasSubstr("at least one axis"));
  EXPECT_THAT(error(HybridMesh::Create({0, 4}, {2, 1}, {}, two)), HasSubstr("size 0"));
  EXPECT_THAT(error(HybridMesh::Create({1, 4}, {2, 0}, {}, two)), HasSubstr("size 0"));
  EXPECT_THAT(error(HybridMesh::Create({1, 4, 1}, {2, 1, 1}, {"a", "b"}, two)),
              HasSubstr("2 axis names"));
  EXPECT_THAT(error(HybridMesh::Create({1, 4, 1}, {2, 1, 1}, {"a", "b", "a"}, two)),
              HasSubstr("appears twice"));
  EXPECT_THAT(error(HybridMesh::Create({1}, {}, {}, mesh::Topology())), HasSubstr("no devices"));
  EXPECT_THAT(error(HybridMesh::Create({int64_t{1} << 32, int64_t{1} << 32}, {2, 1}, {}, two)),
              HasSubstr("more than 2^40 devices"));
}

// ----------------------------------------------------------------------------------------------
// Global mesh.

TEST(GlobalMeshTest, SetGetClear) {
  clear_global_mesh();
  EXPECT_FALSE(get_global_mesh().has_value());
  Mesh mesh = *Mesh::Create(Iota(4), {2, 2}, {"x", "y"});
  set_global_mesh(mesh);
  ASSERT_TRUE(get_global_mesh().has_value());
  EXPECT_EQ(*get_global_mesh(), mesh);
  // A HybridMesh is a Mesh.
  set_global_mesh(*HybridMesh::Create({1, 4, 1}, {2, 1, 1}, {}, TwoSlices()));
  EXPECT_EQ(get_global_mesh()->size(), 8);
  clear_global_mesh();
  EXPECT_FALSE(get_global_mesh().has_value());
}

}  // namespace
}  // namespace tessel::spmd
