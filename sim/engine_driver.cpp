// Host and DRAM for the engine on the fast Verilator path (groupnet_hw.sim.engine_rtl).
//
// The design under test is the wrapper `gn_dut` that engine_rtl.py generates around an
// engine top (hw/engine/sequencer.py's EngineShell, or any top with the same ports):
//   clk, rst;
//   rd_address, rd_burstcount, rd_byteenable, rd_read, rd_waitrequest, rd_readdata,
//   rd_readdatavalid                      (the Avalon-MM read master)
//   wr_address, wr_burstcount, wr_byteenable, wr_write, wr_writedata, wr_waitrequest
//                                         (the Avalon-MM write master)
//   csr_address, csr_read, csr_write, csr_writedata, csr_readdata
//                                         (the register agent, read latency 1)
//   irq.
// Both DRAM ports are served by one gn::DramModel (dram_model.h) holding the memory
// image; the host's side (register writes and reads through the agent port, one per
// cycle, as the HPS's lightweight bridge does) is this file's.
//
// usage: Vdut_sim IMAGE_IN IMAGE_OUT RESULT_JSON --base A --window-base A
//          --window-limit A --program A --rd-bytes N --rd-max-burst N --wr-bytes N
//          --wr-max-burst N [--latency L] [--bytes-per-cycle B] [--stall P] [--seed S]
//          [--max-pending N] [--max-cycles N] [--reset-at C] [--no-guard]
//
// A run: reset; read ID; write WINDOW_BASE, WINDOW_LIMIT, PROGRAM_ADDRESS; write
// CONTROL = START | IRQ_ENABLE; poll STATUS (one read per cycle) until DONE or ERROR,
// or --max-cycles after START (then "timeout": 1 in the result). With --reset-at C,
// CONTROL.SOFT_RESET is written C cycles after START, STATUS is polled until BUSY
// falls (the DMAs finish their bursts), and START is written again: the run that
// counts is the second one. After DONE or ERROR the loop goes on until the engine is
// not BUSY and the memory owes no word (so the image written out is final), then the
// counters are read (_LO then _HI) and STATUS once more.
//
// Unless --no-guard, the DRAM model fails on any access outside the window the driver
// writes (so "no access outside the window" is checked on every command, not only by
// comparing images). A protocol violation ends the process with status 3 and the
// model's message on stderr; a bad command line with status 2.
//
// RESULT_JSON: {"id", "status", "done", "error", "error_code", "timeout", "cycles"
// (from the edge that took START to the edge of the STATUS read that saw DONE or
// ERROR), "irq", "counters" {...}, "reset": {...} or null, "drain_cycles",
// "sim_seconds", "dram": {"cycles", "ports": {"rd": {...}, "wr": {...}}}}.

#include "Vdut.h"
#include "verilated.h"

#include "dram_model.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

// Verilated ports of up to 64 bits are integers, wider ones VlWide word arrays.
template <typename T>
void get_bytes(const T& v, uint8_t* out, unsigned n) {
    const uint64_t x = static_cast<uint64_t>(v);
    for (unsigned i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(x >> (8 * i));
}
template <std::size_t N>
void get_bytes(const VlWide<N>& v, uint8_t* out, unsigned n) {
    for (unsigned i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(v.data()[i / 4] >> (8 * (i % 4)));
}
template <typename T>
void set_bytes(T& v, const uint8_t* in, unsigned n) {
    uint64_t x = 0;
    for (unsigned i = 0; i < n; ++i) x |= static_cast<uint64_t>(in[i]) << (8 * i);
    v = static_cast<T>(x);
}
template <std::size_t N>
void set_bytes(VlWide<N>& v, const uint8_t* in, unsigned n) {
    for (std::size_t w = 0; w < N; ++w) {
        uint32_t word = 0;
        for (unsigned b = 0; b < 4; ++b) {
            const unsigned i = 4 * w + b;
            if (i < n) word |= static_cast<uint32_t>(in[i]) << (8 * b);
        }
        v.data()[w] = word;
    }
}
template <typename T>
constexpr unsigned port_bytes(const T&) { return sizeof(T) > 8 ? 8 : sizeof(T); }
template <std::size_t N>
constexpr unsigned port_bytes(const VlWide<N>&) { return 4 * N; }

[[noreturn]] void usage(const std::string& msg) {
    std::fprintf(stderr, "engine driver: %s\n", msg.c_str());
    std::exit(2);
}

// Register indices and fields (groupnet_hw/engine_registers.py; engine_rtl.py passes
// nothing here, the map's version is checked through ID by the caller).
enum Reg : unsigned {
    ID = 0, CONTROL = 1, STATUS = 2, WINDOW_BASE = 3, WINDOW_LIMIT = 4, PROGRAM_ADDRESS = 5,
    COUNTERS_BASE = 8
};
const char* const COUNTER_NAMES[] = {"CYCLES_BUSY", "CYCLES_STALLED", "WORDS_READ",
                                     "WORDS_WRITTEN"};
constexpr uint32_t START = 1, SOFT_RESET = 2, IRQ_ENABLE = 4;
constexpr uint32_t BUSY = 1, DONE = 2, ERROR = 4;

void stats_json(FILE* f, const gn::PortStats& s) {
    std::fprintf(f,
                 "{\"bytes_read\": %llu, \"bytes_written\": %llu, \"read_bursts\": %llu, "
                 "\"write_bursts\": %llu, \"read_words\": %llu, \"write_beats\": %llu, "
                 "\"wait_cycles\": %llu, \"data_wait_cycles\": %llu}",
                 (unsigned long long)s.bytes_read, (unsigned long long)s.bytes_written,
                 (unsigned long long)s.read_bursts, (unsigned long long)s.write_bursts,
                 (unsigned long long)s.read_words, (unsigned long long)s.write_beats,
                 (unsigned long long)s.wait_cycles, (unsigned long long)s.data_wait_cycles);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 4) usage("usage: Vdut_sim IMAGE_IN IMAGE_OUT RESULT_JSON [options]");
    const char* image_in = argv[1];
    const char* image_out = argv[2];
    const char* result_path = argv[3];
    gn::DramConfig cfg;
    uint64_t window_base = 0, window_limit = 0, program = 0, max_cycles = 10000000;
    long long reset_at = -1;
    unsigned rd_bytes = 0, wr_bytes = 0, rd_burst = 0, wr_burst = 0;
    bool guard = true;
    for (int a = 4; a < argc; ++a) {
        std::string opt = argv[a];
        if (opt == "--no-guard") {
            guard = false;
            continue;
        }
        if (a + 1 >= argc) usage("missing value for " + opt);
        const char* val = argv[++a];
        auto u = [&] { return std::strtoull(val, nullptr, 0); };
        if (opt == "--base") cfg.base = u();
        else if (opt == "--window-base") window_base = u();
        else if (opt == "--window-limit") window_limit = u();
        else if (opt == "--program") program = u();
        else if (opt == "--latency") cfg.latency = static_cast<unsigned>(u());
        else if (opt == "--bytes-per-cycle") cfg.bytes_per_cycle = std::atof(val);
        else if (opt == "--stall") cfg.stall = std::atof(val);
        else if (opt == "--seed") cfg.seed = u();
        else if (opt == "--max-pending") cfg.max_pending = static_cast<unsigned>(u());
        else if (opt == "--max-cycles") max_cycles = u();
        else if (opt == "--reset-at") reset_at = std::atoll(val);
        else if (opt == "--rd-bytes") rd_bytes = static_cast<unsigned>(u());
        else if (opt == "--wr-bytes") wr_bytes = static_cast<unsigned>(u());
        else if (opt == "--rd-max-burst") rd_burst = static_cast<unsigned>(u());
        else if (opt == "--wr-max-burst") wr_burst = static_cast<unsigned>(u());
        else usage("unknown option " + opt);
    }

    std::vector<uint8_t> image;
    {
        FILE* f = std::fopen(image_in, "rb");
        if (!f) usage(std::string("cannot open the image ") + image_in);
        uint8_t buf[65536];
        std::size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) image.insert(image.end(), buf, buf + n);
        std::fclose(f);
    }

    auto ctx = std::make_unique<VerilatedContext>();
    ctx->commandArgs(1, argv);
    auto top = std::make_unique<Vdut>(ctx.get());
    if (rd_bytes > port_bytes(top->rd_readdata) || wr_bytes > port_bytes(top->wr_writedata))
        usage("port widths larger than the compiled model's");

    gn::DramModel dram(std::move(image), cfg);
    const int rd = dram.add_port("rd", rd_bytes, rd_burst, true, false);
    const int wr = dram.add_port("wr", wr_bytes, wr_burst, false, true);
    if (guard) dram.set_guard(window_base, window_limit);

    uint64_t cycle = 0;
    // One clock cycle of everything: the memory decides its outputs from the master's
    // registered pins, the design settles with them, the memory takes the edge.
    auto sample = [&] {
        gn::AvalonPins& r = dram.pins(rd);
        r.read = top->rd_read;
        r.write = false;
        r.address = top->rd_address;
        r.burstcount = top->rd_burstcount;
        r.byteenable = static_cast<uint32_t>(top->rd_byteenable);
        gn::AvalonPins& w = dram.pins(wr);
        w.read = false;
        w.write = top->wr_write;
        w.address = top->wr_address;
        w.burstcount = top->wr_burstcount;
        w.byteenable = static_cast<uint32_t>(top->wr_byteenable);
        get_bytes(top->wr_writedata, w.writedata, wr_bytes);
    };
    auto tick = [&] {
        sample();
        dram.drive();
        const gn::AvalonPins& r = dram.pins(rd);
        top->rd_waitrequest = r.waitrequest;
        top->rd_readdatavalid = r.readdatavalid;
        set_bytes(top->rd_readdata, r.readdata, rd_bytes);
        top->wr_waitrequest = dram.pins(wr).waitrequest;
        top->clk = 0;
        top->eval();
        sample();
        dram.edge();
        top->clk = 1;
        top->eval();
        ++cycle;
    };
    auto csr_write = [&](unsigned reg, uint32_t value) {
        top->csr_address = reg;
        top->csr_writedata = value;
        top->csr_write = 1;
        tick();
        top->csr_write = 0;
    };
    auto csr_read = [&](unsigned reg) -> uint32_t {
        top->csr_address = reg;
        top->csr_read = 1;
        tick();
        top->csr_read = 0;
        return top->csr_readdata;  // read latency 1: registered at the edge just taken
    };

    // Reset (the wrapper registers rst: one more edge takes the design out of it).
    top->rst = 1;
    top->csr_read = 0;
    top->csr_write = 0;
    top->rd_waitrequest = 1;
    top->wr_waitrequest = 1;
    top->rd_readdatavalid = 0;
    for (int c = 0; c < 4; ++c) {
        top->clk = 0;
        top->eval();
        top->clk = 1;
        top->eval();
    }
    top->rst = 0;
    top->clk = 0;
    top->eval();
    top->clk = 1;
    top->eval();

    const auto t0 = std::chrono::steady_clock::now();
    const uint32_t id = csr_read(ID);
    csr_write(WINDOW_BASE, static_cast<uint32_t>(window_base));
    csr_write(WINDOW_LIMIT, static_cast<uint32_t>(window_limit));
    csr_write(PROGRAM_ADDRESS, static_cast<uint32_t>(program));
    csr_write(CONTROL, START | IRQ_ENABLE);
    uint64_t start_cycle = cycle;
    bool timed_out = false, did_reset = false;
    uint64_t reset_cycle = 0, reset_busy_cycles = 0;
    uint32_t status_after_reset = 0;
    uint32_t status = 0;
    uint64_t cycles = 0;
    while (true) {
        if (reset_at >= 0 && !did_reset && cycle - start_cycle >= static_cast<uint64_t>(reset_at)) {
            did_reset = true;
            reset_cycle = cycle - start_cycle;
            csr_write(CONTROL, SOFT_RESET | IRQ_ENABLE);
            const uint64_t t = cycle;
            do {
                status_after_reset = csr_read(STATUS);
                if (cycle - t > max_cycles) break;
            } while (status_after_reset & BUSY);
            reset_busy_cycles = cycle - t;
            if (status_after_reset & BUSY) {
                timed_out = true;
                break;
            }
            csr_write(CONTROL, START | IRQ_ENABLE);
            start_cycle = cycle;
        }
        status = csr_read(STATUS);
        if (status & (DONE | ERROR)) {
            cycles = cycle - start_cycle;
            break;
        }
        if (cycle - start_cycle > max_cycles) {
            timed_out = true;
            cycles = cycle - start_cycle;
            break;
        }
    }
    // Let the engine and the memory come to rest, so that the image is final.
    uint64_t drain = 0;
    if (!timed_out) {
        const uint64_t t = cycle;
        while (((csr_read(STATUS) & BUSY) || !dram.idle()) && cycle - t < max_cycles) {
        }
        drain = cycle - t;
    }
    unsigned long long counters[4];
    for (unsigned k = 0; k < 4; ++k) {
        const uint64_t lo = csr_read(COUNTERS_BASE + 2 * k);
        const uint64_t hi = csr_read(COUNTERS_BASE + 2 * k + 1);
        counters[k] = lo | hi << 32;
    }
    const uint32_t final_status = csr_read(STATUS);
    const int irq = top->irq;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    {
        FILE* f = std::fopen(image_out, "wb");
        if (!f) usage(std::string("cannot write the image ") + image_out);
        const auto& mem = dram.memory();
        if (!mem.empty() && std::fwrite(mem.data(), 1, mem.size(), f) != mem.size())
            usage("short write of the image");
        std::fclose(f);
    }
    FILE* out = std::fopen(result_path, "w");
    if (!out) usage("cannot write the result");
    std::fprintf(out, "{\"id\": %u, \"status\": %u, \"status_at_end\": %u, \"done\": %d, "
                      "\"error\": %d, \"error_code\": %u, \"timeout\": %d, \"cycles\": %llu, "
                      "\"irq\": %d, \"drain_cycles\": %llu, \"sim_seconds\": %.6f, ",
                 id, status, final_status, (status & DONE) ? 1 : 0, (status & ERROR) ? 1 : 0,
                 (status >> 8) & 0xFF, timed_out ? 1 : 0, (unsigned long long)cycles, irq,
                 (unsigned long long)drain, seconds);
    std::fprintf(out, "\"counters\": {");
    for (unsigned k = 0; k < 4; ++k)
        std::fprintf(out, "%s\"%s\": %llu", k ? ", " : "", COUNTER_NAMES[k], counters[k]);
    std::fprintf(out, "}, \"reset\": ");
    if (did_reset)
        std::fprintf(out, "{\"at\": %llu, \"busy_cycles\": %llu, \"status\": %u}, ",
                     (unsigned long long)reset_cycle, (unsigned long long)reset_busy_cycles,
                     status_after_reset);
    else
        std::fprintf(out, "null, ");
    std::fprintf(out, "\"dram\": {\"cycles\": %llu, \"ports\": {\"rd\": ",
                 (unsigned long long)dram.cycle());
    stats_json(out, dram.stats(rd));
    std::fprintf(out, ", \"wr\": ");
    stats_json(out, dram.stats(wr));
    std::fprintf(out, "}}}\n");
    std::fclose(out);
    top->final();
    return 0;
}
