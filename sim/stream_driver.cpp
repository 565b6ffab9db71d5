// Stream driver and monitor for the fast Verilator path (groupnet_hw.sim.fast_rtl).
//
// The clock loop runs here, in C++, so a whole-network run costs no Python per
// cycle. The design under test is the wrapper `gn_dut` that fast_rtl.py
// generates around a stream component: ports clk, rst, in_data/in_valid/in_ready,
// out_data/out_valid/out_ready (valid/ready handshake, transfer on a rising edge
// where both are high).
//
// usage: Vdut_sim STIMULUS RESULT [--stall P] [--seed S] [--timeout CYCLES]
//                 [--reset CYCLES] [--drain CYCLES] [--outputs N]
//                 [--frame-beats N] [--pace-cycles C --pace-beats B]
//                 [--trace FILE --trace-frame F]
//
// STIMULUS: little-endian uint64 per input beat (the input port is at most 64
// bits wide). RESULT: text, one record per line:
//   O <cycle> <hex payload>      an output beat and the edge that took it
//   I <cycle> <index>            an input beat and the edge that took it: the first
//                                beat of each frame with --frame-beats, else every beat
//   E <message>                  protocol error, extra beats, timeout
//   S <inputs_accepted> <cycles> <timeout 0/1> <extra outputs> <seconds>
//
// Timing conventions match the cocotb testbench: cycle 0 is the first rising
// edge after reset at which the first input beat is offered; `cycles` is the
// last output's cycle + 1.
//
// Stalls (--stall P, seeded, deterministic): before each input beat, with
// probability P, valid stays low for 1..4 cycles; on each cycle, with
// probability P, out_ready drops for 1..4 cycles. The wrapper's checker watches
// the core's output (valid held, payload stable while waiting); the driver reports
// its flags. After the expected outputs, --drain cycles with ready high catch extra
// (duplicated) beats.
//
// Pacing (--pace-cycles C --pace-beats B): input beat i is not offered before cycle
// ceil(i * C / B), so frames arrive at a fixed rate (the schedule's frame interval
// over its pixels) rather than as fast as the core takes them; a latency measured
// that way is the one the compiler's ideal timing model predicts (compiler/latency.py).
// Without it, beats are offered as soon as the previous one is taken.

#include "Vdut.h"
#include "verilated.h"
#if VM_TRACE
#include "verilated_vcd_c.h"
#endif

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

// Output ports of up to 64 bits are integers; wider ones are VlWide word arrays.
template <typename T>
std::string to_hex(const T& value) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(value));
    return buf;
}

template <std::size_t N>
std::string to_hex(const VlWide<N>& value) {
    std::string out;
    bool leading = true;
    char buf[16];
    for (std::size_t w = N; w-- > 0;) {
        uint32_t word = value[w];
        if (leading) {
            if (word == 0 && w != 0) continue;
            std::snprintf(buf, sizeof buf, "%x", word);
            leading = false;
        } else {
            std::snprintf(buf, sizeof buf, "%08x", word);
        }
        out += buf;
    }
    return out;
}

// splitmix64: small, seedable, identical on every platform.
struct Rng {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
    int gap() { return 1 + static_cast<int>(next() % 4); }
};

[[noreturn]] void usage(const char* msg) {
    std::fprintf(stderr, "Vdut_sim: %s\n", msg);
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) usage("usage: Vdut_sim STIMULUS RESULT [options]");
    const char* stim_path = argv[1];
    const char* result_path = argv[2];
    double stall = 0.0;
    uint64_t seed = 0, timeout = 0, reset_cycles = 4, drain = 0, n_out = 0;
    uint64_t frame_beats = 0, pace_cycles = 0, pace_beats = 1;
    long long trace_frame = -1;
    const char* trace_path = nullptr;
    for (int a = 3; a < argc; ++a) {
        std::string opt = argv[a];
        if (a + 1 >= argc) usage(("missing value for " + opt).c_str());
        const char* val = argv[++a];
        if (opt == "--stall") stall = std::atof(val);
        else if (opt == "--seed") seed = std::strtoull(val, nullptr, 10);
        else if (opt == "--timeout") timeout = std::strtoull(val, nullptr, 10);
        else if (opt == "--reset") reset_cycles = std::strtoull(val, nullptr, 10);
        else if (opt == "--drain") drain = std::strtoull(val, nullptr, 10);
        else if (opt == "--outputs") n_out = std::strtoull(val, nullptr, 10);
        else if (opt == "--frame-beats") frame_beats = std::strtoull(val, nullptr, 10);
        else if (opt == "--pace-cycles") pace_cycles = std::strtoull(val, nullptr, 10);
        else if (opt == "--pace-beats") pace_beats = std::strtoull(val, nullptr, 10);
        else if (opt == "--trace") trace_path = val;
        else if (opt == "--trace-frame") trace_frame = std::atoll(val);
        else usage(("unknown option " + opt).c_str());
    }
    if (pace_beats == 0) usage("--pace-beats must be positive");

    std::vector<uint64_t> beats;
    {
        FILE* f = std::fopen(stim_path, "rb");
        if (!f) usage("cannot open the stimulus file");
        uint64_t word;
        while (std::fread(&word, sizeof word, 1, f) == 1) beats.push_back(word);
        std::fclose(f);
    }
    FILE* out = std::fopen(result_path, "w");
    if (!out) usage("cannot open the result file");

    auto ctx = std::make_unique<VerilatedContext>();
    ctx->commandArgs(1, argv);
    auto top = std::make_unique<Vdut>(ctx.get());
#if VM_TRACE
    std::unique_ptr<VerilatedVcdC> tfp;
    if (trace_path) {
        ctx->traceEverOn(true);
        tfp = std::make_unique<VerilatedVcdC>();
        top->trace(tfp.get(), 99);
        tfp->open(trace_path);
    }
#else
    if (trace_path) usage("this model was built without tracing");
#endif
    bool tracing = false;
    uint64_t sim_time = 0;
    auto step = [&](int clk) {
        top->clk = clk;
        top->eval();
#if VM_TRACE
        if (tracing) tfp->dump(sim_time);
#endif
        sim_time += 5;  // half of a 10 ns period
    };

    // Reset.
    top->rst = 1;
    top->in_valid = 0;
    top->out_ready = 0;
    top->in_data = beats.empty() ? 0 : beats[0];
    for (uint64_t c = 0; c < (reset_cycles < 2 ? 2 : reset_cycles); ++c) {
        step(0);
        step(1);
    }
    top->rst = 0;
    // The wrapper registers reset: one more edge takes the core out of it.
    step(0);
    step(1);

    Rng rng{seed};
    const std::size_t n_in = beats.size();
    std::size_t idx = 0;
    uint64_t got = 0, extra = 0, cycle = 0;
    bool offering = false, timed_out = false;
    int in_gap = (stall > 0 && rng.uniform() < stall) ? rng.gap() : 0;
    int out_gap = 0;
    if (timeout == 0) timeout = 1000000 + 1000 * (n_in + n_out);
    const uint64_t end_limit = ~0ULL;
    uint64_t drain_until = end_limit;

    auto t0 = std::chrono::steady_clock::now();
    while (true) {
        if (got >= n_out && drain_until == end_limit) drain_until = cycle + drain;
        if (cycle >= drain_until) break;
        if (cycle >= timeout) {
            timed_out = true;
            break;
        }
        // Inputs for the coming edge.
        // integer arithmetic, so the pacing is exactly ceil(i * C / B) for any rate
        const bool due = pace_cycles == 0 ||
                         cycle * pace_beats >= static_cast<uint64_t>(idx) * pace_cycles;
        if (!offering && idx < n_in && due) {
            if (in_gap > 0) {
                --in_gap;
            } else {
                top->in_data = beats[idx];
                offering = true;
                if (trace_path && frame_beats && trace_frame >= 0 &&
                    idx == static_cast<std::size_t>(trace_frame) * frame_beats)
                    tracing = true;
            }
        }
        bool ready = true;
        if (stall > 0) {
            if (out_gap == 0 && rng.uniform() < stall) out_gap = rng.gap();
            if (out_gap > 0) {
                --out_gap;
                ready = false;
            }
        }
        top->in_valid = offering;
        top->out_ready = ready;
        step(0);  // settle combinational paths (ready may follow valid)

        bool in_fire = offering && top->in_ready;
        if (top->out_valid && ready) {
            if (got < n_out) {
                std::fprintf(out, "O %llu %s\n", static_cast<unsigned long long>(cycle),
                             to_hex(top->out_data).c_str());
                ++got;
            } else {
                ++extra;
            }
        }
        step(1);
        // the traced frame ends with the edge that takes its output
        if (tracing && static_cast<long long>(got) > trace_frame) tracing = false;
        if (in_fire) {
            if (frame_beats == 0 || idx % frame_beats == 0)
                std::fprintf(out, "I %llu %zu\n", static_cast<unsigned long long>(cycle), idx);
            ++idx;
            offering = false;
            if (idx < n_in && stall > 0 && rng.uniform() < stall) in_gap = rng.gap();
        }
        ++cycle;
    }
    if (top->protocol_error & 1)
        std::fprintf(out, "E core output: valid dropped before a waiting beat was taken\n");
    if (top->protocol_error & 2)
        std::fprintf(out, "E core output: payload changed while its beat was waiting\n");
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (timed_out)
        std::fprintf(out, "E timeout: %llu of %llu outputs and %zu of %zu inputs in %llu cycles\n",
                     static_cast<unsigned long long>(got), static_cast<unsigned long long>(n_out),
                     idx, n_in, static_cast<unsigned long long>(timeout));
    if (extra)
        std::fprintf(out, "E %llu output beats beyond the %llu expected\n",
                     static_cast<unsigned long long>(extra), static_cast<unsigned long long>(n_out));
    std::fprintf(out, "S %zu %llu %d %llu %.6f\n", idx, static_cast<unsigned long long>(cycle),
                 timed_out ? 1 : 0, static_cast<unsigned long long>(extra), seconds);
    std::fclose(out);
#if VM_TRACE
    if (tfp) tfp->close();
#endif
    top->final();
    return 0;
}
