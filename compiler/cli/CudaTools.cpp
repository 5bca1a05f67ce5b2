#include "compiler/cli/CudaTools.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "runtime/Driver.h"

extern char** environ;

namespace attnjit::compiler::cli {
namespace {

namespace fs = std::filesystem;

support::Diagnostic toolError(const std::string& tool, const std::string& message) {
  return support::Diagnostic{support::Location{tool, 0, 0}, message};
}

// A private directory for a tool's input and output files, removed with everything
// in it when it goes out of scope.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    std::string pattern = (fs::temp_directory_path() / "attnjit-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;

  bool created() const { return !path_.empty(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

bool writeWholeFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  return out && out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())) && out.flush();
}

std::string readWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct ToolRun {
  int exitCode = -1;  // -1: ended by a signal
  std::string out, err;
};

// Runs `executable` with `args` (no shell involved), stdin from /dev/null and the
// output captured through files in `scratch`.
support::Expected<ToolRun> runTool(const std::string& executable, const std::vector<std::string>& args,
                              const ScratchDirectory& scratch) {
  std::string outPath = scratch.file("stdout"), errPath = scratch.file("stderr");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> argvStrings = {executable};
  argvStrings.insert(argvStrings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argvStrings) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int spawned = posix_spawn(&pid, executable.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return toolError(executable, "cannot start: " + std::string(std::strerror(spawned)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return toolError(executable, "cannot wait for the process: " + std::string(std::strerror(errno)));
    }
  }
  ToolRun run;
  run.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = readWholeFile(outPath);
  run.err = readWholeFile(errPath);
  return run;
}

std::string failureText(const ToolRun& run) {
  std::string text =
      run.exitCode < 0 ? "was killed by a signal" : "failed with exit status " + std::to_string(run.exitCode);
  std::string output = run.err.empty() ? run.out : run.err;
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  return output.empty() ? text : text + ":\n" + output;
}

int firstNumberAfter(const std::string& text, const std::regex& pattern) {
  std::smatch match;
  return std::regex_search(text, match, pattern) ? std::stoi(match[1].str()) : 0;
}

}  // namespace

std::string findOnPath(const std::string& tool) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::stringstream directories(path);
  std::string directory;
  while (std::getline(directories, directory, ':')) {
    if (directory.empty()) directory = ".";
    std::string candidate = directory + "/" + tool;
    struct stat info {};
    if (stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

int ptxasMaxPtxVersion(const std::string& ptxas) {
  ScratchDirectory scratch;
  if (!scratch.created()) return 0;
  auto run = runTool(ptxas, {"--version"}, scratch);
  if (!run || run->exitCode != 0) return 0;
  std::smatch match;
  if (!std::regex_search(run->out, match, std::regex(R"(release (\d+)\.(\d+))"))) return 0;
  // A CUDA release and the driver of that release accept the same PTX ISA.
  int asDriverVersion = std::stoi(match[1].str()) * 1000 + std::stoi(match[2].str()) * 10;
  auto isa = runtime::maxPtxIsaForDriverVersion(asDriverVersion);
  return isa ? isa->asNumber() : 0;
}

support::Expected<AssembledKernel> assemblePtx(const std::string& ptxas, const std::string& ptx,
                                               const std::string& arch, bool verbose) {
  ScratchDirectory scratch;
  if (!scratch.created()) return toolError(ptxas, "cannot create a temporary directory");
  std::string ptxPath = scratch.file("kernel.ptx"), cubinPath = scratch.file("kernel.cubin");
  if (!writeWholeFile(ptxPath, ptx)) return toolError(ptxPath, "cannot write the PTX for ptxas");
  std::vector<std::string> args = {"-arch=" + arch};
  if (verbose) args.push_back("-v");
  args.insert(args.end(), {ptxPath, "-o", cubinPath});
  auto run = runTool(ptxas, args, scratch);
  if (!run) return run.status();
  if (run->exitCode != 0) return toolError(ptxas, "ptxas " + failureText(*run));
  return AssembledKernel{readWholeFile(cubinPath), run->err};
}

support::Expected<std::string> disassembleCubin(const std::string& disassembler, const std::string& cubin) {
  ScratchDirectory scratch;
  if (!scratch.created()) return toolError(disassembler, "cannot create a temporary directory");
  std::string cubinPath = scratch.file("kernel.cubin");
  if (!writeWholeFile(cubinPath, cubin)) return toolError(cubinPath, "cannot write the cubin for the disassembler");
  bool isNvdisasm = fs::path(disassembler).filename() == "nvdisasm";
  std::vector<std::string> args = isNvdisasm ? std::vector<std::string>{"-c", cubinPath}
                                             : std::vector<std::string>{"--dump-sass", cubinPath};
  auto run = runTool(disassembler, args, scratch);
  if (!run) return run.status();
  std::string name = fs::path(disassembler).filename().string();
  if (run->exitCode != 0) return toolError(disassembler, name + " " + failureText(*run));
  return run->out;
}

PtxasResources parsePtxasResources(const std::string& log) {
  PtxasResources resources;
  std::smatch registers;
  if (!std::regex_search(log, registers, std::regex(R"(Used (\d+) registers)"))) return resources;
  resources.found = true;
  resources.registers = std::stoi(registers[1].str());
  resources.stackFrameBytes = firstNumberAfter(log, std::regex(R"((\d+) bytes stack frame)"));
  resources.spillStoreBytes = firstNumberAfter(log, std::regex(R"((\d+) bytes spill stores)"));
  resources.spillLoadBytes = firstNumberAfter(log, std::regex(R"((\d+) bytes spill loads)"));
  return resources;
}

}  // namespace attnjit::compiler::cli
