#include "tessel/mesh/topology/topology.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessel::mesh {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ConfigPath(const std::string& name) {
  return std::string(TESSEL_CONFIGS_DIR) + "/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// Checks every invariant a Topology promises, whatever input produced it.
void ExpectConsistent(const Topology& topology) {
  const int64_t n = topology.num_devices();
  ASSERT_GT(n, 0);
  ASSERT_LE(n, kMaxDevices);
  ASSERT_EQ(static_cast<int64_t>(topology.devices().size()), n);
  int64_t devices_in_slices = 0;
  std::set<int64_t> hosts_seen;
  for (const Slice& slice : topology.slices()) {
    ASSERT_EQ(slice.wraparound.size(), slice.shape.size());
    int64_t product = 1;
    for (int64_t dim : slice.shape) product *= dim;
    EXPECT_EQ(slice.num_devices(), product);
    EXPECT_EQ(slice.num_hosts * slice.devices_per_host, product);
    EXPECT_EQ(static_cast<int64_t>(slice.host_indices.size()), slice.num_hosts);
    EXPECT_TRUE(std::is_sorted(slice.device_ids.begin(), slice.device_ids.end()));
    devices_in_slices += slice.num_devices();
    for (int64_t h : slice.host_indices) {
      EXPECT_TRUE(hosts_seen.insert(h).second);
      EXPECT_EQ(topology.host(h).slice, slice.index);
    }
    std::set<std::vector<int64_t>> coords_seen;
    for (int64_t id : slice.device_ids) {
      const Device& device = topology.device(id);
      EXPECT_EQ(device.slice, slice.index);
      ASSERT_EQ(device.coords.size(), slice.shape.size());
      for (size_t d = 0; d < slice.shape.size(); ++d) {
        EXPECT_GE(device.coords[d], 0);
        EXPECT_LT(device.coords[d], slice.shape[d]);
      }
      EXPECT_TRUE(coords_seen.insert(device.coords).second);
      EXPECT_EQ(topology.DeviceAt(slice.index, device.coords), id);
    }
  }
  EXPECT_EQ(devices_in_slices, n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(topology.devices()[i].id, i);
  for (const Host& host : topology.hosts()) {
    EXPECT_EQ(topology.host(host.index).index, host.index);
    const Slice& slice = topology.slice(host.slice);
    EXPECT_EQ(host.num_devices(), slice.devices_per_host);
    EXPECT_EQ(slice.host_indices[host.index_in_slice], host.index);
    for (int64_t local = 0; local < host.num_devices(); ++local) {
      const Device& device = topology.device(host.device_ids[local]);
      EXPECT_EQ(device.host, host.index);
      EXPECT_EQ(device.local_index, local);
    }
  }
  if (topology.num_slices() > 1) {
    EXPECT_TRUE(topology.dcn().has_value());
  }
  EXPECT_FALSE(topology.device_spec().peak_tflops.empty());
  EXPECT_GT(topology.device_spec().hbm_bytes, 0);
  for (int64_t s = 0; s < topology.num_slices(); ++s) {
    if (topology.ici().kind == IciKind::kTorus) {
      EXPECT_EQ(static_cast<int64_t>(topology.IciLinks(s).size()), topology.NumIciLinks(s));
    }
  }
}

// Generated topologies number devices by (slice, host, local index).
void ExpectGeneratedOrder(const Topology& topology) {
  for (int64_t i = 1; i < topology.num_devices(); ++i) {
    const Device& a = topology.device(i - 1);
    const Device& b = topology.device(i);
    EXPECT_LT(std::make_tuple(a.slice, a.host, a.local_index),
              std::make_tuple(b.slice, b.host, b.local_index))
        << "devices " << i - 1 << " and " << i;
  }
}

struct PresetCase {
  std::string file;
  int64_t num_slices;
  int64_t num_hosts;
  int64_t num_devices;
  int64_t devices_per_host;
  int64_t ici_links_per_slice;
};

class PresetTest : public ::testing::TestWithParam<PresetCase> {};

TEST_P(PresetTest, LoadsWithExpectedCounts) {
  const PresetCase& c = GetParam();
  absl::StatusOr<Topology> topology = LoadTopology(ConfigPath(c.file));
  ASSERT_TRUE(topology.ok()) << topology.status();
  EXPECT_EQ(topology->num_slices(), c.num_slices);
  EXPECT_EQ(topology->num_hosts(), c.num_hosts);
  EXPECT_EQ(topology->num_devices(), c.num_devices);
  for (const Host& host : topology->hosts()) EXPECT_EQ(host.num_devices(), c.devices_per_host);
  for (int64_t s = 0; s < topology->num_slices(); ++s) {
    EXPECT_EQ(topology->NumIciLinks(s), c.ici_links_per_slice) << "slice " << s;
  }
  EXPECT_FALSE(topology->name().empty());
  EXPECT_FALSE(topology->sources().empty());
  ExpectConsistent(*topology);
  ExpectGeneratedOrder(*topology);
}

INSTANTIATE_TEST_SUITE_P(Configs, PresetTest,
                         ::testing::Values(
                             // 2x2x1 grid: 2 links along x, 2 along y.
                             PresetCase{"v4-8.json", 1, 1, 4, 4, 4},
                             PresetCase{"v4-8_explicit.json", 1, 1, 4, 4, 4},
                             // 2x2x2 grid: 4 links per dimension.
                             PresetCase{"v4-16.json", 1, 2, 8, 4, 12},
                             PresetCase{"two_v4-8_slices.json", 2, 2, 8, 4, 4},
                             PresetCase{"two_slices_2x2hosts.json", 2, 4, 8, 2, 4},
                             PresetCase{"single_device.json", 1, 1, 1, 1, 0},
                             // 16x16 torus: 16 rings of 16 links per dimension.
                             PresetCase{"v5e-256.json", 1, 32, 256, 8, 512},
                             // 4x4x4 torus: 16 rings of 4 links per dimension.
                             PresetCase{"v5p-128.json", 1, 16, 64, 4, 192},
                             // NVSwitch: one port per GPU.
                             PresetCase{"h100_2nodes.json", 2, 2, 16, 8, 8}),
                         [](const ::testing::TestParamInfo<PresetCase>& info) {
                           std::string name = info.param.file.substr(0, info.param.file.size() - 5);
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(PresetTest, EveryConfigFileIsCovered) {
  std::set<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(TESSEL_CONFIGS_DIR)) {
    if (entry.path().extension() == ".json") files.insert(entry.path().filename().string());
  }
  for (const std::string& file : files) {
    absl::StatusOr<Topology> topology = LoadTopology(ConfigPath(file));
    EXPECT_TRUE(topology.ok()) << topology.status();
  }
  EXPECT_GE(files.size(), 8u);
}

TEST(TopologyTest, HostBandwidthIsOptional) {
  // Absent: 0 (no host link given); the v5e and v5p presets give 15 GB/s per chip.
  EXPECT_EQ(LoadTopology(ConfigPath("two_slices_2x2hosts.json"))
                ->device_spec()
                .host_bandwidth_gbytes_per_s,
            0);
  EXPECT_EQ(LoadTopology(ConfigPath("v5e-256.json"))->device_spec().host_bandwidth_gbytes_per_s,
            15);
  EXPECT_EQ(LoadTopology(ConfigPath("v5p-128.json"))->device_spec().host_bandwidth_gbytes_per_s,
            15);
}

TEST(TopologyTest, MainExampleLayout) {
  absl::StatusOr<Topology> t = LoadTopology(ConfigPath("two_slices_2x2hosts.json"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->host(0).device_ids, ElementsAre(0, 1));
  EXPECT_THAT(t->host(1).device_ids, ElementsAre(2, 3));
  EXPECT_THAT(t->host(2).device_ids, ElementsAre(4, 5));
  EXPECT_EQ(t->host(2).slice, 1);
  EXPECT_EQ(t->host(2).index_in_slice, 0);
  EXPECT_THAT(t->slice(1).device_ids, ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(t->slice(1).host_indices, ElementsAre(2, 3));
  // Hosts own 2x1x1 blocks, x fastest.
  EXPECT_THAT(t->device(0).coords, ElementsAre(0, 0, 0));
  EXPECT_THAT(t->device(1).coords, ElementsAre(1, 0, 0));
  EXPECT_THAT(t->device(2).coords, ElementsAre(0, 1, 0));
  EXPECT_THAT(t->device(5).coords, ElementsAre(1, 0, 0));
  EXPECT_EQ(t->device(5).slice, 1);
  EXPECT_EQ(t->device(5).host, 2);
  EXPECT_EQ(t->device(5).local_index, 1);
  EXPECT_EQ(t->DeviceAt(1, {0, 1, 0}), 6);
  EXPECT_EQ(t->DeviceAt(1, {0, 2, 0}), std::nullopt);
  EXPECT_EQ(t->DeviceAt(2, {0, 0, 0}), std::nullopt);
  EXPECT_EQ(t->DeviceAt(0, {0, 0}), std::nullopt);
  ASSERT_TRUE(t->dcn().has_value());
  EXPECT_EQ(t->dcn()->bandwidth_gbps, 200);
  EXPECT_EQ(t->device_spec().PeakTflops("bf16"), 275.0);
  EXPECT_EQ(t->device_spec().PeakTflops("f64"), std::nullopt);
  EXPECT_EQ(t->TotalPeakTflops().at("bf16"), 8 * 275.0);
  EXPECT_EQ(t->TotalHbmBytes(), 8 * (int64_t{32} << 30));
}

TEST(TopologyTest, HostBlocksFollowHostShape) {
  absl::StatusOr<Topology> v4_16 = LoadTopology(ConfigPath("v4-16.json"));
  ASSERT_TRUE(v4_16.ok()) << v4_16.status();
  for (int64_t id : v4_16->host(0).device_ids) EXPECT_EQ(v4_16->device(id).coords[2], 0);
  for (int64_t id : v4_16->host(1).device_ids) EXPECT_EQ(v4_16->device(id).coords[2], 1);

  absl::StatusOr<Topology> v5p = LoadTopology(ConfigPath("v5p-128.json"));
  ASSERT_TRUE(v5p.ok()) << v5p.status();
  std::vector<std::vector<int64_t>> host1;
  for (int64_t id : v5p->host(1).device_ids) host1.push_back(v5p->device(id).coords);
  EXPECT_THAT(host1, ElementsAre(ElementsAre(2, 0, 0), ElementsAre(3, 0, 0), ElementsAre(2, 1, 0),
                                 ElementsAre(3, 1, 0)));
  // Host 2 is the next block along y.
  EXPECT_THAT(v5p->device(v5p->host(2).device_ids[0]).coords, ElementsAre(0, 2, 0));

  absl::StatusOr<Topology> v5e = LoadTopology(ConfigPath("v5e-256.json"));
  ASSERT_TRUE(v5e.ok()) << v5e.status();
  EXPECT_THAT(v5e->device(v5e->host(0).device_ids.back()).coords, ElementsAre(3, 1));
  EXPECT_THAT(v5e->device(v5e->host(4).device_ids.front()).coords, ElementsAre(0, 2));
}

TEST(TopologyTest, ExplicitDevicesMatchGenerated) {
  absl::StatusOr<Topology> generated = LoadTopology(ConfigPath("v4-8.json"));
  absl::StatusOr<Topology> listed = LoadTopology(ConfigPath("v4-8_explicit.json"));
  ASSERT_TRUE(generated.ok()) << generated.status();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(generated->num_devices(), listed->num_devices());
  for (int64_t i = 0; i < generated->num_devices(); ++i) {
    EXPECT_EQ(generated->device(i).coords, listed->device(i).coords);
    EXPECT_EQ(generated->device(i).host, listed->device(i).host);
    EXPECT_EQ(generated->device(i).local_index, listed->device(i).local_index);
  }
}

TEST(TopologyTest, ExplicitDevicesInAnyOrder) {
  json j = json::parse(ReadFile(ConfigPath("two_slices_2x2hosts.json")));
  for (json& slice : j["slices"]) slice.erase("host_shape");
  // Ids deliberately not in (slice, host) order: device 0 is on host 3.
  j["devices"] = json::array();
  const int64_t hosts[] = {3, 0, 1, 2, 0, 1, 3, 2};
  std::vector<int64_t> next_coord(4, 0);
  for (int64_t id = 0; id < 8; ++id) {
    int64_t host = hosts[id];
    int64_t slice = host / 2;
    int64_t linear = (host % 2) * 2 + next_coord[host]++;
    j["devices"].push_back(
        {{"id", id}, {"slice", slice}, {"host", host}, {"coords", {linear % 2, linear / 2, 0}}});
  }
  absl::StatusOr<Topology> t = ParseTopology(j.dump(), "<test>");
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectConsistent(*t);
  EXPECT_THAT(t->host(3).device_ids, ElementsAre(0, 6));
  EXPECT_EQ(t->device(6).local_index, 1);
  EXPECT_THAT(t->host(0).device_ids, ElementsAre(1, 4));
}

TEST(TopologyTest, UniformMatchesMainExample) {
  absl::StatusOr<Topology> uniform = MakeUniformTopology(2, {2, 2, 1}, 2);
  absl::StatusOr<Topology> file = LoadTopology(ConfigPath("two_slices_2x2hosts.json"));
  ASSERT_TRUE(uniform.ok()) << uniform.status();
  ASSERT_TRUE(file.ok()) << file.status();
  ExpectConsistent(*uniform);
  ASSERT_EQ(uniform->num_devices(), file->num_devices());
  for (int64_t i = 0; i < file->num_devices(); ++i) {
    EXPECT_EQ(uniform->device(i).coords, file->device(i).coords) << i;
    EXPECT_EQ(uniform->device(i).host, file->device(i).host) << i;
  }
  EXPECT_EQ(MakeUniformTopology(1, {4}, 3).status().message(),
            "<uniform>: hosts_per_slice: expected a positive divisor of the 4 devices of slice "
            "shape [4], got 3");
  EXPECT_FALSE(MakeUniformTopology(0, {4}, 1).ok());
  EXPECT_FALSE(MakeUniformTopology(1, {0}, 1).ok());
  EXPECT_FALSE(MakeUniformTopology(1, {2, 2}, 1, {true}).ok());
  absl::StatusOr<Topology> ring = MakeUniformTopology(1, {8}, 1, {true});
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->NumIciLinks(0), 8);
}

TEST(TopologyTest, IciLinksOfARing) {
  absl::StatusOr<Topology> t = MakeUniformTopology(1, {4, 2}, 1, {true, true});
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<IciLink> links = t->IciLinks(0);
  // x: rings of 4 (4 links each, 2 rings); y: size 2, one link per pair even with wraparound.
  ASSERT_EQ(links.size(), 12u);
  EXPECT_EQ(links[0].dim, 0);
  EXPECT_EQ(links[0].device_a, 0);
  EXPECT_EQ(links[0].device_b, 1);
  EXPECT_FALSE(links[0].wraparound);
  EXPECT_EQ(links[2].device_a, 2);
  EXPECT_EQ(links[2].device_b, 3);
  EXPECT_EQ(links[3].device_a, 3);
  EXPECT_EQ(links[3].device_b, 0);
  EXPECT_TRUE(links[3].wraparound);
  EXPECT_EQ(links[8].dim, 1);
  EXPECT_EQ(links[8].device_a, 0);
  EXPECT_EQ(links[8].device_b, 4);
}

TEST(TopologyTest, SwitchSliceHasPortsNotLinks) {
  absl::StatusOr<Topology> t = LoadTopology(ConfigPath("h100_2nodes.json"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ici().kind, IciKind::kSwitch);
  EXPECT_EQ(IciKindName(t->ici().kind), "switch");
  EXPECT_TRUE(t->IciLinks(0).empty());
  EXPECT_EQ(t->NumIciLinks(1), 8);
  EXPECT_EQ(t->ici().bandwidth_gbps, 3600);
  EXPECT_EQ(t->dcn()->bandwidth_gbps, 3200);
}

TEST(TopologyTest, FindOutOfRange) {
  absl::StatusOr<Topology> t = LoadTopology(ConfigPath("v4-8.json"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->FindDevice(4).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(t->FindDevice(-1).status().message(),
            "device id -1 is outside the topology v4-8 (ids 0..3)");
  EXPECT_EQ(t->FindHost(1).status().message(),
            "host index 1 is outside the topology v4-8 (hosts 0..0)");
  ASSERT_TRUE(t->FindDevice(3).ok());
  EXPECT_EQ((*t->FindDevice(3))->id, 3);
  ASSERT_TRUE(t->FindHost(0).ok());
}

TEST(TopologyTest, DefaultIsEmpty) {
  Topology t;
  EXPECT_EQ(t.num_devices(), 0);
  EXPECT_EQ(t.num_hosts(), 0);
  EXPECT_FALSE(t.FindDevice(0).ok());
}

TEST(LoadTopologyTest, MissingFileIsNotFound) {
  absl::StatusOr<Topology> t = LoadTopology("/nonexistent/dir/x.json");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.status().message(), "/nonexistent/dir/x.json: no such file");
}

TEST(LoadTopologyTest, DirectoryIsInvalid) {
  absl::StatusOr<Topology> t = LoadTopology(TESSEL_CONFIGS_DIR);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("is a directory"));
}

TEST(LoadTopologyTest, ErrorsNameTheFile) {
  std::string path = ::testing::TempDir() + "/tessel_topology_bad.json";
  {
    std::ofstream file(path);
    file << R"({"slices": 3})";
  }
  absl::StatusOr<Topology> t = LoadTopology(path);
  EXPECT_EQ(t.status().message(),
            path +
                ": /device_spec: expected an object (the device spec), got nothing "
                "(missing key)");
  std::filesystem::remove(path);
}

// ---------------------------------------------------------------------------------------------
// Error paths: each edit of a valid document and the exact message it must produce.

json Base() { return json::parse(ReadFile(ConfigPath("two_slices_2x2hosts.json"))); }

json ExplicitBase() {
  json j = Base();
  for (json& slice : j["slices"]) slice.erase("host_shape");
  absl::StatusOr<Topology> t = LoadTopology(ConfigPath("two_slices_2x2hosts.json"));
  j["devices"] = json::array();
  for (const Device& d : t->devices()) {
    j["devices"].push_back(
        {{"id", d.id}, {"slice", d.slice}, {"host", d.host}, {"coords", d.coords}});
  }
  return j;
}

struct ErrorCase {
  std::string name;
  std::function<json()> make;
  std::string message;  // the full message after "x.json: "
};

class ErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ErrorTest, GivesTheExactMessage) {
  const ErrorCase& c = GetParam();
  absl::StatusOr<Topology> t = ParseTopology(c.make().dump(), "configs/x.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(), "configs/x.json: " + c.message);
}

template <typename Fn>
std::function<json()> Edit(Fn fn, std::function<json()> base = Base) {
  return [fn, base] {
    json j = base();
    fn(j);
    return j;
  };
}

INSTANTIATE_TEST_SUITE_P(
    Validation, ErrorTest,
    ::testing::Values(
        ErrorCase{"ZeroHosts", Edit([](json& j) { j["slices"][0]["hosts"] = 0; }),
                  "/slices/0/hosts: expected a positive integer, got 0"},
        ErrorCase{"NegativeHosts", Edit([](json& j) { j["slices"][1]["hosts"] = -2; }),
                  "/slices/1/hosts: expected a positive integer, got -2"},
        ErrorCase{"HugeHosts", Edit([](json& j) { j["slices"][0]["hosts"] = 1 << 20; }),
                  "/slices/0/hosts: expected a positive integer at most 262144, got 1048576"},
        ErrorCase{"MissingHosts", Edit([](json& j) { j["slices"][0].erase("hosts"); }),
                  "/slices/0/hosts: expected a positive integer, got nothing (missing key)"},
        ErrorCase{"StringHosts", Edit([](json& j) { j["slices"][0]["hosts"] = "2"; }),
                  "/slices/0/hosts: expected a positive integer, got \"2\""},
        ErrorCase{"FloatHosts", Edit([](json& j) { j["slices"][0]["hosts"] = 2.5; }),
                  "/slices/0/hosts: expected a positive integer, got 2.5"},
        ErrorCase{"UnknownSliceKey", Edit([](json& j) { j["slices"][0]["hsts"] = 2; }),
                  "/slices/0/hsts: unknown key \"hsts\"; expected one of \"shape\", "
                  "\"wraparound\", \"hosts\", \"devices_per_host\", \"host_shape\" (or "
                  "\"name\", \"description\", \"source\", \"comment\")"},
        ErrorCase{"UnknownTopKey", Edit([](json& j) { j["slice"] = json::array(); }),
                  "/slice: unknown key \"slice\"; expected one of \"device_spec\", \"ici\", "
                  "\"dcn\", \"slices\", \"devices\" (or \"name\", \"description\", "
                  "\"source\", \"comment\")"},
        ErrorCase{"BadSourceType", Edit([](json& j) { j["source"] = 3; }),
                  "/source: expected a string or an array of strings, got 3"},
        ErrorCase{"BadNameType", Edit([](json& j) { j["ici"]["name"] = true; }),
                  "/ici/name: expected a string, got true"},
        ErrorCase{"RootNotObject",
                  [] {
                    return json::array({1, 2});
                  },
                  "/: expected an object, got [1,2]"},
        ErrorCase{"MissingSlices", Edit([](json& j) { j.erase("slices"); }),
                  "/slices: expected a non-empty array of slices, got nothing (missing key)"},
        ErrorCase{"EmptySlices", Edit([](json& j) { j["slices"] = json::array(); }),
                  "/slices: expected a non-empty array of slices, got []"},
        ErrorCase{"SliceNotObject", Edit([](json& j) { j["slices"][1] = 4; }),
                  "/slices/1: expected an object, got 4"},
        ErrorCase{"MissingDcn", Edit([](json& j) { j.erase("dcn"); }),
                  "/dcn: expected an object (the DCN link spec, required with 2 slices), got "
                  "nothing (missing key)"},
        ErrorCase{"NegativeDcnLatency", Edit([](json& j) { j["dcn"]["latency_us"] = -1; }),
                  "/dcn/latency_us: expected 0 or a number from 1e-06 to 1e+09, got -1"},
        ErrorCase{"ZeroIciBandwidth", Edit([](json& j) { j["ici"]["bandwidth_gbps"] = 0; }),
                  "/ici/bandwidth_gbps: expected a number from 1e-06 to 1e+09, got 0"},
        // Denormal or huge figures would make every cost infinite or zero.
        ErrorCase{"TinyIciBandwidth", Edit([](json& j) { j["ici"]["bandwidth_gbps"] = 1e-320; }),
                  "/ici/bandwidth_gbps: expected a number from 1e-06 to 1e+09, got 1e-320"},
        ErrorCase{"HugePeak",
                  Edit([](json& j) { j["device_spec"]["peak_tflops"]["bf16"] = 1e308; }),
                  "/device_spec/peak_tflops/bf16: expected a number from 1e-06 to 1e+09, got "
                  "1e+308"},
        ErrorCase{"BadIciKind", Edit([](json& j) { j["ici"]["kind"] = "ring"; }),
                  "/ici/kind: expected \"torus\" or \"switch\", got \"ring\""},
        ErrorCase{"MissingIci", Edit([](json& j) { j.erase("ici"); }),
                  "/ici: expected an object (the ICI link spec), got nothing (missing key)"},
        ErrorCase{"UnknownDType",
                  Edit([](json& j) { j["device_spec"]["peak_tflops"]["bfloat16"] = 1; }),
                  "/device_spec/peak_tflops/bfloat16: unknown dtype \"bfloat16\"; expected "
                  "one of pred, s4, s8, s16, s32, s64, u4, u8, u16, u32, u64, f16, bf16, f32, "
                  "f64, f8e4m3fn, f8e5m2"},
        ErrorCase{"EmptyPeak",
                  Edit([](json& j) { j["device_spec"]["peak_tflops"] = json::object(); }),
                  "/device_spec/peak_tflops: expected a non-empty object mapping dtype names "
                  "to 10^12 op/s (e.g. {\"bf16\": 275}), got {}"},
        ErrorCase{"NegativePeak",
                  Edit([](json& j) { j["device_spec"]["peak_tflops"]["bf16"] = -275; }),
                  "/device_spec/peak_tflops/bf16: expected a number from 1e-06 to 1e+09, got -275"},
        ErrorCase{"FloatHbmBytes", Edit([](json& j) { j["device_spec"]["hbm_bytes"] = 3.2e10; }),
                  "/device_spec/hbm_bytes: expected a positive integer (bytes) at most "
                  "17592186044416, got 32000000000.0"},
        ErrorCase{
            "MissingHbmBandwidth",
            Edit([](json& j) { j["device_spec"].erase("hbm_bandwidth_gbytes_per_s"); }),
            "/device_spec/hbm_bandwidth_gbytes_per_s: expected a number from 1e-06 to 1e+09, got "
            "nothing (missing key)"},
        ErrorCase{"NegativeHostBandwidth",
                  Edit([](json& j) { j["device_spec"]["host_bandwidth_gbytes_per_s"] = -15; }),
                  "/device_spec/host_bandwidth_gbytes_per_s: expected a number from 1e-06 to "
                  "1e+09, got -15"},
        ErrorCase{"ShapeNotArray", Edit([](json& j) { j["slices"][0]["shape"] = 4; }),
                  "/slices/0/shape: expected an array (1 to 8 positive integers), got 4"},
        ErrorCase{"ShapeZeroDim", Edit([](json& j) { j["slices"][0]["shape"][1] = 0; }),
                  "/slices/0/shape/1: expected a positive integer, got 0"},
        ErrorCase{"ShapeTooLarge", Edit([](json& j) {
                    j["slices"][0]["shape"] = {1024, 1024};
                  }),
                  "/slices/0/shape: expected at most 262144 devices, got shape [1024,1024]"},
        ErrorCase{"WraparoundRank", Edit([](json& j) {
                    j["slices"][0]["wraparound"] = {true, false};
                  }),
                  "/slices/0/wraparound: expected an array of 3 booleans (one per dimension "
                  "of shape [2,2,1]), got [true,false]"},
        ErrorCase{"WraparoundType", Edit([](json& j) { j["slices"][0]["wraparound"][2] = 0; }),
                  "/slices/0/wraparound/2: expected true or false, got 0"},
        ErrorCase{"CountsDoNotAddUp", Edit([](json& j) { j["slices"][1]["devices_per_host"] = 4; }),
                  "/slices/1/devices_per_host: expected hosts * devices_per_host = 4 (the "
                  "product of shape [2,2,1]), got 2 * 4 = 8"},
        ErrorCase{"HostShapeNotDivisor", Edit([](json& j) {
                    j["slices"][0]["shape"] = {3, 2, 1};
                    j["slices"][0]["hosts"] = 3;
                  }),
                  "/slices/0/host_shape/0: expected a divisor of shape[0] = 3, got 2"},
        ErrorCase{"HostShapeWrongBlock", Edit([](json& j) {
                    j["slices"][0]["host_shape"] = {2, 2, 1};
                  }),
                  "/slices/0/host_shape: expected a block of devices_per_host = 2 devices, got "
                  "[2,2,1]"},
        ErrorCase{"HostShapeRank", Edit([](json& j) { j["slices"][0]["host_shape"] = {2}; }),
                  "/slices/0/host_shape: expected an array of 3 positive integers (one per "
                  "dimension of shape [2,2,1]), got [2]"},
        ErrorCase{"TooManyDevicesOverall", Edit([](json& j) {
                    for (int i = 0; i < 3; ++i) {
                      j["slices"][i] = {{"shape", {256, 256}},
                                        {"wraparound", {false, false}},
                                        {"hosts", 1},
                                        {"devices_per_host", 65536}};
                    }
                    j["slices"][3] = j["slices"][2];
                    j["slices"][4] = j["slices"][2];
                  }),
                  "/slices/4: expected at most 262144 devices in all slices, got 327680 up to "
                  "this slice"},
        // Explicitly listed devices.
        ErrorCase{"DuplicateId", Edit([](json& j) { j["devices"][5]["id"] = 2; }, ExplicitBase),
                  "/devices/5/id: duplicate device id 2 (also at /devices/2)"},
        ErrorCase{"IdNotDense", Edit([](json& j) { j["devices"][7]["id"] = 9; }, ExplicitBase),
                  "/devices/7/id: expected an id in [0, 8) (ids are dense 0..N-1 for the N = 8 "
                  "listed devices), got 9"},
        ErrorCase{"CoordsOutsideGrid",
                  Edit(
                      [](json& j) {
                        j["devices"][3]["coords"] = {1, 2, 0};
                      },
                      ExplicitBase),
                  "/devices/3/coords/1: expected an integer in [0, 2) (slice 0 has shape "
                  "[2,2,1]), got 2"},
        ErrorCase{"CoordsRank",
                  Edit(
                      [](json& j) {
                        j["devices"][3]["coords"] = {1, 1};
                      },
                      ExplicitBase),
                  "/devices/3/coords: expected an array of 3 integers (slice 0 has shape "
                  "[2,2,1]), got [1,1]"},
        ErrorCase{"DuplicateCoords",
                  Edit(
                      [](json& j) {
                        j["devices"][3]["coords"] = {0, 0, 0};
                      },
                      ExplicitBase),
                  "/devices/3/coords: duplicate coordinates [0,0,0] in slice 0 (also at "
                  "/devices/0)"},
        ErrorCase{"HostOfOtherSlice",
                  Edit([](json& j) { j["devices"][1]["host"] = 2; }, ExplicitBase),
                  "/devices/1/host: expected a global host index of slice 0 (0..1), got 2"},
        ErrorCase{"SliceOutOfRange",
                  Edit([](json& j) { j["devices"][1]["slice"] = 2; }, ExplicitBase),
                  "/devices/1/slice: expected a slice index in [0, 2), got 2"},
        ErrorCase{"MissingCoords",
                  Edit([](json& j) { j["devices"][0].erase("coords"); }, ExplicitBase),
                  "/devices/0/coords: expected an array of 3 integers (slice 0 has shape "
                  "[2,2,1]), got nothing (missing key)"},
        ErrorCase{"TooFewDevices", Edit([](json& j) { j["devices"].erase(7); }, ExplicitBase),
                  "/devices: expected 8 devices (the products of the slice shapes), got 7"},
        ErrorCase{"DeviceCountsPerHost",
                  Edit(
                      [](json& j) {
                        // Device 1 moves from host 0 to host 1 (same slice, free coordinates
                        // stay unique), leaving host 0 with 1 device and host 1 with 3.
                        j["devices"][1]["host"] = 1;
                      },
                      ExplicitBase),
                  "/devices: expected devices_per_host = 2 devices on host 0 (slice 0), got 1"},
        ErrorCase{"HostShapeWithExplicitDevices",
                  Edit(
                      [](json& j) {
                        j["slices"][0]["host_shape"] = {2, 1, 1};
                      },
                      ExplicitBase),
                  "/slices/0/host_shape: host_shape is only used when devices are generated; "
                  "with a top-level \"devices\" list each device names its host"},
        ErrorCase{"DevicesNotArray",
                  Edit([](json& j) { j["devices"] = json::object(); }, ExplicitBase),
                  "/devices: expected an array of devices, got {}"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return info.param.name; });

TEST(ParseErrorTest, NotJson) {
  absl::StatusOr<Topology> t = ParseTopology("{\"slices\": [1,\n 2,]}", "configs/x.json");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()),
              StartsWith("configs/x.json: invalid JSON: parse error at line 2, column 4: "));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("(byte offset 18)"));
}

TEST(ParseErrorTest, EmptyText) {
  absl::StatusOr<Topology> t = ParseTopology("", "<string>");
  EXPECT_THAT(std::string(t.status().message()), StartsWith("<string>: invalid JSON: "));
}

TEST(ParseErrorTest, DeepNesting) {
  std::string text = std::string(100, '[') + std::string(100, ']');
  absl::StatusOr<Topology> t = ParseTopology(text, "<string>");
  EXPECT_EQ(t.status().message(),
            "<string>: invalid JSON: nesting deeper than 64 levels at byte offset 64");
  // Brackets inside strings do not count.
  std::string in_string = "{\"name\": \"" + std::string(100, '[') + "\"}";
  EXPECT_THAT(std::string(ParseTopology(in_string, "<string>").status().message()),
              HasSubstr("/device_spec"));
}

TEST(ParseErrorTest, DuplicateKey) {
  std::string text = ReadFile(ConfigPath("v4-8.json"));
  size_t pos = text.find("\"hosts\": 1");
  ASSERT_NE(pos, std::string::npos);
  text.insert(pos, "\"hosts\": 2, ");
  absl::StatusOr<Topology> t = ParseTopology(text, "configs/x.json");
  EXPECT_EQ(t.status().message(), "configs/x.json: /slices/0/hosts: duplicate key in one object");
}

// ---------------------------------------------------------------------------------------------
// Fuzz: mangled presets must give either a valid topology or kInvalidArgument naming the
// source, never a crash, a hang or an exception.

const std::vector<std::string>& PresetTexts() {
  static const std::vector<std::string>* texts = [] {
    auto* out = new std::vector<std::string>;
    for (const char* file :
         {"v4-8.json", "v4-16.json", "two_v4-8_slices.json", "two_slices_2x2hosts.json",
          "single_device.json", "v4-8_explicit.json", "v5p-128.json", "h100_2nodes.json"}) {
      out->push_back(ReadFile(ConfigPath(file)));
    }
    return out;
  }();
  return *texts;
}

std::string MutateBytes(std::string text, std::mt19937_64& rng) {
  static constexpr char kInteresting[] = "{}[]\",:-.0123456789eEtrufalsn \\/";
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits && !text.empty(); ++e) {
    size_t pos = rng() % text.size();
    char c = (rng() % 4 == 0) ? static_cast<char>(rng() % 256)
                              : kInteresting[rng() % (sizeof(kInteresting) - 1)];
    switch (rng() % 3) {
      case 0:
        text[pos] = c;
        break;
      case 1:
        text.insert(text.begin() + static_cast<std::ptrdiff_t>(pos), c);
        break;
      default:
        text.erase(pos, 1 + rng() % 4);
        break;
    }
  }
  return text;
}

json RandomValue(std::mt19937_64& rng) {
  switch (rng() % 14) {
    case 0:
      return nullptr;
    case 1:
      return true;
    case 2:
      return -1;
    case 3:
      return 0;
    case 4:
      return 2.5;
    case 5:
      return "x";
    case 6:
      return json::array();
    case 7:
      return json::object();
    case 8:
      return 1e300;
    case 9:
      return INT64_MAX;
    case 10:
      return UINT64_MAX;
    case 11:
      return json::array({1, 2});
    case 12:
      return static_cast<int64_t>(rng() % 9);
    default:
      return json::array({true, false, 1});
  }
}

// Replaces, deletes or duplicates one random node of `j`, or adds an unknown key.
void MutateJson(json& j, std::mt19937_64& rng) {
  std::vector<json*> nodes;
  std::function<void(json&)> collect = [&](json& node) {
    nodes.push_back(&node);
    if (node.is_structured()) {
      for (json& child : node) collect(child);
    }
  };
  collect(j);
  json& target = *nodes[rng() % nodes.size()];
  switch (rng() % 5) {
    case 0:
    case 1:
      target = RandomValue(rng);
      break;
    case 2:
      if (target.is_object() && !target.empty()) {
        auto it = target.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % target.size()));
        target.erase(it);
      } else if (target.is_array() && !target.empty()) {
        target.erase(rng() % target.size());
      }
      break;
    case 3:
      if (target.is_array() && !target.empty()) target.push_back(target[rng() % target.size()]);
      break;
    default:
      if (target.is_object()) target["typo"] = RandomValue(rng);
      break;
  }
}

TEST(FuzzTest, MangledJsonNeverCrashes) {
  std::mt19937_64 rng(20240611);
  int valid = 0;
  int invalid = 0;
  constexpr int kIterations = 6000;
  for (int i = 0; i < kIterations; ++i) {
    const std::string& base = PresetTexts()[rng() % PresetTexts().size()];
    std::string text;
    switch (i % 3) {
      case 0:
        text = MutateBytes(base, rng);
        break;
      case 1:
        text = base.substr(0, rng() % (base.size() + 1));
        break;
      default: {
        json j = json::parse(base);
        const int mutations = 1 + static_cast<int>(rng() % 3);
        for (int m = 0; m < mutations; ++m) MutateJson(j, rng);
        text = j.dump();
        break;
      }
    }
    absl::StatusOr<Topology> t = ParseTopology(text, "fuzz.json");
    if (t.ok()) {
      ++valid;
      ExpectConsistent(*t);
    } else {
      ++invalid;
      EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
      EXPECT_THAT(std::string(t.status().message()), StartsWith("fuzz.json: ")) << text;
    }
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "iteration " << i << " input:\n" << text;
      break;
    }
  }
  std::cout << "fuzz: " << valid << " valid, " << invalid << " rejected\n";
  // Both outcomes must occur, or the mutations test nothing.
  EXPECT_GT(valid, 50);
  EXPECT_GT(invalid, kIterations / 2);
}

}  // namespace
}  // namespace tessel::mesh
