// Where this process sits in a multi-host job, read from the environment that a launcher set:
// `tessel launch` / `tessel run` (TESSEL_*), Open MPI's mpirun (OMPI_COMM_WORLD_*), MPICH /
// Intel MPI's hydra (PMI_*) or Slurm's srun (SLURM_*). The multi-controller model of JAX and
// PyTorch/XLA: every host runs the same program and learns its index from its launcher.
//
//   // In main() of a program started once per host:
//   if (mesh::LaunchedAsHost()) {
//     TESSEL_ASSIGN_OR_RETURN(mesh::HostEnvironment env, mesh::ReadHostEnvironment());
//     TESSEL_ASSIGN_OR_RETURN(mesh::Topology topology, mesh::LoadTopology(env.config_path));
//     transport::ZmqOptions options;
//     TESSEL_RETURN_IF_ERROR(mesh::ApplyHostEnvironment(env, &options));
//     options.device_map = mesh::DeviceMapOf(topology);
//     TESSEL_ASSIGN_OR_RETURN(auto comm, transport::ZmqTransport::Create(options));
//   }
//
// Variables (the first one set wins, in this order):
//   host index   TESSEL_HOST_INDEX, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID
//   host count   TESSEL_NUM_HOSTS, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS
//   topology     TESSEL_CONFIG: path of the topology JSON (docs/topology.md)
//   coordinator  TESSEL_COORDINATOR: "tcp://host:port" or "ipc:///path" of the bootstrap
//                coordinator (served by host 0 unless TESSEL_EXTERNAL_COORDINATOR=1). Under
//                mpirun / hydra without it, every rank derives the same address from the job id
//                the MPI launcher gives every rank (see kDerivedCoordinatorSources):
//                "ipc://<folder>/tessel-<16 hex digits of FNV-1a(job id)>.coord", in a folder
//                only this user can enter: $XDG_RUNTIME_DIR when it is ours with mode 0700, else
//                $TMPDIR/tessel-<uid> ($TMPDIR defaults to /tmp), made 0700 and checked (owner,
//                mode, not a link); the data sockets go beside it unless TESSEL_IPC_DIR is set.
//                This works on one machine only. Under srun, and across machines,
//                TESSEL_COORDINATOR=tcp://<host 0's address>:<free port> is required.
//   token        TESSEL_JOB_TOKEN: shared secret authenticating every connection ("" if unset);
//                required with a tcp:// coordinator (docs/launch.md says how to pass it)
//   optional     TESSEL_BOOTSTRAP_TIMEOUT_S (seconds, > 0; default 60): how long a host waits
//                for the others at bootstrap; TESSEL_TCP_INTERFACE: the address or interface name
//                (e.g. 10.0.0.5, eth0) the tcp data socket binds, required across machines
//                (default 127.0.0.1); TESSEL_IPC_DIR: directory of the ipc data sockets
//                (default $TMPDIR, else /tmp).
//
// Sources: torchrun's RANK / WORLD_SIZE / MASTER_ADDR; Open MPI's OMPI_COMM_WORLD_RANK/SIZE
// (https://docs.open-mpi.org/en/main/tuning-apps/environment-var.html); hydra's PMI_RANK /
// PMI_SIZE; Slurm's SLURM_PROCID / SLURM_NTASKS (srun(1), "OUTPUT ENVIRONMENT VARIABLES");
// torch_xla reads the same pair from mpirun/Slurm through its cluster resolvers.
#ifndef TESSEL_MESH_HOST_ENV_H_
#define TESSEL_MESH_HOST_ENV_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tessel/mesh/topology/topology.h"
#include "tessel/transport/communicator.h"
#include "tessel/transport/zmq_transport.h"

namespace tessel::mesh {

// The variables that name a job id every rank of one mpirun / hydra job shares, in the order
// they are tried when TESSEL_COORDINATOR is unset: PMIX_NAMESPACE (Open MPI 4 and 5 through
// PMIx, also set by hydra with PMIx), OMPI_MCA_ess_base_jobid (Open MPI's job id),
// PMI_KVSNAME (hydra's PMI-1 key-value space name).
inline constexpr std::string_view kDerivedCoordinatorSources[] = {
    "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_KVSNAME"};

// Where this process sits in a multi-host job, from the environment.
struct HostEnvironment {
  // TESSEL_HOST_INDEX, else OMPI_COMM_WORLD_RANK, else PMI_RANK, else SLURM_PROCID.
  int64_t host_index = 0;
  // TESSEL_NUM_HOSTS, else OMPI_COMM_WORLD_SIZE, else PMI_SIZE, else SLURM_NTASKS.
  int64_t num_hosts = 1;
  std::string config_path;  // TESSEL_CONFIG ("" if unset)
  // TESSEL_COORDINATOR; under mpirun / hydra without it, the derived ipc:// address in a
  // private folder (see the file comment); "" only when num_hosts == 1 and nothing names one.
  std::string coordinator;
  std::string job_token;  // TESSEL_JOB_TOKEN ("" if unset)
  // Which variables gave the rank and the host count, for messages: "TESSEL_HOST_INDEX",
  // "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID" (the rank variable's name; the count
  // always comes from the same family).
  std::string source;
  // TESSEL_BOOTSTRAP_TIMEOUT_S when set (seconds, may be fractional).
  std::optional<absl::Duration> bootstrap_timeout;
  std::string tcp_interface;  // TESSEL_TCP_INTERFACE ("" if unset)
  // TESSEL_IPC_DIR; unset with a derived coordinator, that coordinator's private folder; else "".
  std::string ipc_dir;
};

// True when the environment names a rank: any of TESSEL_HOST_INDEX, OMPI_COMM_WORLD_RANK,
// PMI_RANK, SLURM_PROCID is set (even to a bad value; ReadHostEnvironment then says why).
[[nodiscard]] bool LaunchedAsHost();

// Reads and validates the variables above. With a derived coordinator it creates the private
// folder (mode 0700) when it is missing.
// Errors:
//   kFailedPrecondition when the derived coordinator's folder cannot be made or is not private
//     ("/tmp/tessel-1000 is not a private folder of this user ...": another user's, open to
//     others, or a link);
//   kInvalidArgument, with num_hosts > 1, for a tcp:// coordinator without TESSEL_JOB_TOKEN,
//     saying how to pass one under mpirun (-x TESSEL_JOB_TOKEN) and srun (--export=ALL);
//   kNotFound when no rank variable is set (the process was not started by a launcher);
//   kInvalidArgument naming the variable and its value when a number does not parse, the host
//     count is missing or < 1, the index is outside [0, num_hosts), TESSEL_BOOTSTRAP_TIMEOUT_S
//     is not a positive number, TESSEL_COORDINATOR is not a tcp:// or ipc:// address, or
//     num_hosts > 1 under srun (or any launcher without a job id) with no TESSEL_COORDINATOR:
//       SLURM_PROCID=1 (srun): no coordinator address; set TESSEL_COORDINATOR=tcp://<host>:<port>
//       for every host, with <host> the machine that runs SLURM_PROCID=0 and <port> a free
//       port there
[[nodiscard]] absl::StatusOr<HostEnvironment> ReadHostEnvironment();

// Fills a transport::ZmqOptions for this host: rank, num_hosts, coordinator_address, protocol
// (kTcp when the coordinator starts with "tcp://", else kIpc), job_token, and, where set,
// bootstrap_timeout, tcp_interface and ipc_dir. Then applies transport::ApplyEnvironment (the
// TESSEL_EXTERNAL_COORDINATOR, TESSEL_CURVE and TESSEL_SHARED_MEMORY booleans). Leaves device_map
// and the other fields alone.
// Errors: those of transport::ApplyEnvironment (a boolean variable with an unknown value).
[[nodiscard]] absl::Status ApplyHostEnvironment(const HostEnvironment& env,
                                                transport::ZmqOptions* options);

// The DeviceMap of `topology`: host_of_device[d] = topology.device(d).host and
// slice_of_device[d] = topology.device(d).slice for every global device id d.
[[nodiscard]] transport::DeviceMap DeviceMapOf(const Topology& topology);

}  // namespace tessel::mesh

#endif  // TESSEL_MESH_HOST_ENV_H_
