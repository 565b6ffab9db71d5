// A model of DRAM behind Avalon-MM burst ports, for the engine's fast Verilator path
// (groupnet_hw.sim.engine_rtl, sim/engine_driver.cpp). Header only; no Verilator types,
// so a driver copies the pins between its Verilated model and AvalonPins each cycle.
//
// One byte array (the memory image, at byte address `base`), N master ports. Each port
// has the Avalon-MM burst pins of hw/engine/avalon.py (address, burstcount, read,
// write, writedata, byteenable, waitrequest, readdata, readdatavalid), 4 to 32 bytes
// of data (32 to 256 bits, the HPS's FPGA-to-SDRAM widths) and a maximum burst.
//
// Timing, per cycle:
//   drive()  before the rising edge: decides waitrequest, readdatavalid and readdata
//            from the model's state and the pins the master presents (registered
//            outputs of the master, so known before the edge);
//   edge()   at the rising edge, with the master's pins as they are at the edge:
//            takes commands and write beats whose waitrequest was low, checks them.
//   A read command accepted at the edge of cycle c has its first word presented in
//   cycle c + latency (latency 1: the very next cycle), later words as bandwidth and
//   stalls allow; the bursts of one port return in order. Read bursts are pipelined:
//   up to max_pending per port are accepted before waitrequest holds the next.
//
// Bandwidth: a token bucket shared by all ports. Every cycle adds bytes_per_cycle
// tokens (fractional), capped at the widest port's word less a byte plus one cycle's
// bytes: what a draining port can have left of a word and then gain. So a rate of
// whole bytes is sustained also where it does not divide the word, while idle cycles
// bank no burst of credit beyond that (a rate with a fraction of a byte may lose a
// fraction of a byte in a cycle the cap binds). Returning a read word or accepting a
// write beat costs the port's word in tokens. So a 128-bit port at 8 B/cycle returns
// a word every other cycle, at 10 B/cycle five words in eight cycles, and a copy (one
// read and one write port) at B bytes per cycle moves B/2 bytes each way. Ports take
// tokens in round-robin order (the first port changes every cycle), so no port
// starves another.
//
// Stalls (stall = p, seeded, deterministic for a seed): in each cycle each port gets
// waitrequest with probability p, and a read word that could be returned is held back
// with probability p (a readdatavalid gap).
//
// Checks (Avalon Interface Specifications ch. 3, and the engine's own rules from
// hw/engine/avalon.py and dma.py); a violation calls the failure handler, which by
// default prints "DRAM model: cycle N, port P: message" on stderr and exits with
// status 3:
//   - a command (or write beat) held by waitrequest changed or was withdrawn before
//     it was taken (read, write, address, burstcount, byteenable, writedata);
//   - read and write together, or a direction the port does not have;
//   - burstcount 0 or over the port's maximum; an address not aligned to the word;
//     a burst crossing a 4 KiB boundary (`boundary`); any byte outside the memory;
//     any byte outside the guarded window (set_guard: the engine's DRAM window, so
//     that an access outside it fails loudly instead of only changing memory);
//   - a write beat of an open burst whose address or burstcount differs from the
//     burst's first beat, and a read command while a write burst is open.
// Writes honour byteenable per byte. The model counts per port the bytes read and
// written (enabled bytes), bursts, cycles a command or beat waited on waitrequest
// and cycles a read was owed and no word came.

#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace gn {

// splitmix64: small, seedable, identical on every platform (as in stream_driver.cpp).
struct DramRng {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
};

struct DramConfig {
    uint64_t base = 0;             // byte address of the image's first byte
    unsigned latency = 10;         // cycles from a read command's acceptance to its first word
    double bytes_per_cycle = 8.0;  // sustained bandwidth shared by all ports
    double stall = 0.0;            // probability of waitrequest / a readdatavalid gap per cycle
    uint64_t seed = 0;
    unsigned max_pending = 8;      // read bursts accepted and not yet returned, per port
    uint64_t boundary = 4096;      // no burst may cross a multiple of this
};

// One port's pins as the memory sees them.
struct AvalonPins {
    // from the master
    bool read = false;
    bool write = false;
    uint64_t address = 0;
    unsigned burstcount = 0;
    uint32_t byteenable = 0;
    uint8_t writedata[32] = {};
    // to the master
    bool waitrequest = true;
    bool readdatavalid = false;
    uint8_t readdata[32] = {};
};

struct PortStats {
    uint64_t bytes_read = 0;
    uint64_t bytes_written = 0;     // bytes with their byteenable bit set
    uint64_t read_bursts = 0;
    uint64_t write_bursts = 0;
    uint64_t read_words = 0;
    uint64_t write_beats = 0;
    uint64_t wait_cycles = 0;       // a command or beat presented and held by waitrequest
    uint64_t data_wait_cycles = 0;  // a read owed (accepted, not all returned), no word
};

class DramModel {
  public:
    using Failure = std::function<void(const std::string&)>;

    DramModel(std::vector<uint8_t> image, const DramConfig& config)
        : mem_(std::move(image)), cfg_(config), rng_{config.seed ^ 0x6a09e667f3bcc908ULL} {
        if (cfg_.latency < 1) fail_config("latency must be at least 1 cycle");
        if (!(cfg_.bytes_per_cycle > 0)) fail_config("bytes_per_cycle must be positive");
        if (cfg_.stall < 0 || cfg_.stall >= 1) fail_config("stall must be in [0, 1)");
        if (cfg_.max_pending < 1) fail_config("max_pending must be at least 1");
        guard_lo_ = cfg_.base;
        guard_hi_ = cfg_.base + mem_.size();
    }

    // Add a port; returns its index. data_bytes: 4, 8, 16 or 32.
    int add_port(const std::string& name, unsigned data_bytes, unsigned max_burst,
                 bool can_read, bool can_write) {
        if (data_bytes != 4 && data_bytes != 8 && data_bytes != 16 && data_bytes != 32)
            fail_config("a port's data is 4, 8, 16 or 32 bytes");
        if (max_burst < 1) fail_config("a port's max_burst must be at least 1");
        Port p;
        p.name = name;
        p.bytes = data_bytes;
        p.max_burst = max_burst;
        p.can_read = can_read;
        p.can_write = can_write;
        ports_.push_back(p);
        cap_ = std::max(cap_, static_cast<double>(data_bytes));
        return static_cast<int>(ports_.size() - 1);
    }

    // Accesses outside [lo, hi) fail (besides those outside the memory).
    void set_guard(uint64_t lo, uint64_t hi) {
        guard_lo_ = std::max(lo, cfg_.base);
        guard_hi_ = std::min(hi, cfg_.base + mem_.size());
    }

    void on_failure(Failure f) { failure_ = std::move(f); }

    AvalonPins& pins(int port) { return ports_[port].pins; }
    const PortStats& stats(int port) const { return ports_[port].stats; }
    const std::string& name(int port) const { return ports_[port].name; }
    int n_ports() const { return static_cast<int>(ports_.size()); }
    const std::vector<uint8_t>& memory() const { return mem_; }
    uint64_t cycle() const { return cycle_; }
    const DramConfig& config() const { return cfg_; }

    // No read word owed and no write burst open on any port.
    bool idle() const {
        for (const Port& p : ports_)
            if (!p.reads.empty() || p.wleft) return false;
        return true;
    }

    // Before the edge: the memory's outputs for this cycle.
    void drive() {
        tokens_ = std::min(tokens_ + cfg_.bytes_per_cycle,
                           std::max(cap_, cap_ - 1.0 + cfg_.bytes_per_cycle));
        const int n = n_ports();
        for (int k = 0; k < n; ++k) {
            Port& p = ports_[(rr_ + k) % n];
            AvalonPins& pin = p.pins;
            pin.readdatavalid = false;
            p.reserved = false;
            // a read word, if one is due, not held back by a stall, and bandwidth allows
            if (!p.reads.empty() && p.reads.front().ready <= cycle_ && !stalled() &&
                tokens_ >= p.bytes) {
                Burst& b = p.reads.front();
                std::memcpy(pin.readdata, &mem_[b.address - cfg_.base], p.bytes);
                pin.readdatavalid = true;
                tokens_ -= p.bytes;
                p.stats.bytes_read += p.bytes;
                p.stats.read_words += 1;
                b.address += p.bytes;
                if (--b.words == 0) p.reads.pop_front();
            } else {
                // garbage, so that a master that takes readdata without readdatavalid
                // shows up as wrong data
                for (unsigned i = 0; i < p.bytes; ++i)
                    pin.readdata[i] = static_cast<uint8_t>(rng_.next());
            }
            bool wait = stalled();
            if (p.can_read && p.reads.size() >= cfg_.max_pending && !pin.write) wait = true;
            // a write beat needs the bandwidth of its word: reserve it now, give it back
            // at the edge if the beat was not taken
            if (!wait && pin.write) {
                if (tokens_ >= p.bytes) {
                    tokens_ -= p.bytes;
                    p.reserved = true;
                } else {
                    wait = true;
                }
            }
            pin.waitrequest = wait;
        }
        rr_ = (rr_ + 1) % std::max(n, 1);
    }

    // At the rising edge: take what the master presents, check it.
    void edge() {
        for (int i = 0; i < n_ports(); ++i) edge_port(i);
        ++cycle_;
    }

  private:
    struct Burst {
        uint64_t address;
        unsigned words;
        uint64_t ready;  // first cycle its next word may be returned
    };
    struct Held {
        bool read, write;
        uint64_t address;
        unsigned burstcount;
        uint32_t byteenable;
        uint8_t writedata[32];
    };
    struct Port {
        std::string name;
        unsigned bytes = 8;
        unsigned max_burst = 1;
        bool can_read = false, can_write = false;
        AvalonPins pins;
        PortStats stats;
        std::deque<Burst> reads;
        bool reserved = false;
        bool held_valid = false;
        Held held{};
        uint64_t waddress = 0;  // the open write burst: first beat's address, burstcount
        unsigned wcount = 0;
        unsigned wleft = 0;     // beats still to come (0: no burst open)
        uint64_t wnext = 0;
    };

    bool stalled() { return cfg_.stall > 0 && rng_.uniform() < cfg_.stall; }

    [[noreturn]] void fail_config(const char* msg) {
        std::fprintf(stderr, "DRAM model: bad configuration: %s\n", msg);
        std::exit(2);
    }

    void violation(const Port& p, const std::string& msg) {
        char head[128];
        std::snprintf(head, sizeof head, "DRAM model: cycle %llu, port %s: ",
                      static_cast<unsigned long long>(cycle_), p.name.c_str());
        std::string text = head + msg;
        if (failure_) failure_(text);
        std::fprintf(stderr, "%s\n", text.c_str());
        std::exit(3);
    }

    static std::string hex(uint64_t v) {
        char buf[24];
        std::snprintf(buf, sizeof buf, "%#llx", static_cast<unsigned long long>(v));
        return buf;
    }

    void check_burst(const Port& p, const char* kind, uint64_t address, unsigned count) {
        std::string what = std::string(kind) + " burst at " + hex(address) + " of " +
                           std::to_string(count) + " words: ";
        if (count < 1 || count > p.max_burst)
            violation(p, what + "burstcount outside 1.." + std::to_string(p.max_burst));
        if (address % p.bytes)
            violation(p, what + "address not aligned to the " + std::to_string(p.bytes) +
                             "-byte word");
        const uint64_t end = address + static_cast<uint64_t>(count) * p.bytes;
        if (address / cfg_.boundary != (end - 1) / cfg_.boundary)
            violation(p, what + "crosses a " + std::to_string(cfg_.boundary) +
                             "-byte boundary");
        if (address < cfg_.base || end > cfg_.base + mem_.size())
            violation(p, what + "outside the memory [" + hex(cfg_.base) + ", " +
                             hex(cfg_.base + mem_.size()) + ")");
        if (address < guard_lo_ || end > guard_hi_)
            violation(p, what + "outside the guarded window [" + hex(guard_lo_) + ", " +
                             hex(guard_hi_) + ")");
    }

    void edge_port(int i) {
        Port& p = ports_[i];
        const AvalonPins& pin = p.pins;
        const bool read = pin.read, write = pin.write;
        if (p.held_valid) {
            const Held& h = p.held;
            bool same = h.read == read && h.write == write && h.address == pin.address &&
                        h.burstcount == pin.burstcount && h.byteenable == pin.byteenable &&
                        (!write || std::memcmp(h.writedata, pin.writedata, p.bytes) == 0);
            if (!same)
                violation(p, std::string("a ") + (h.read ? "read command" : "write beat") +
                                 " at " + hex(h.address) +
                                 " changed or was withdrawn while waitrequest held it");
        }
        if (read && write) violation(p, "read and write in the same cycle");
        if (read && !p.can_read) violation(p, "read on a write-only port");
        if (write && !p.can_write) violation(p, "write on a read-only port");
        if (read && p.wleft)
            violation(p, "read command inside an open write burst");
        const bool wait = pin.waitrequest;
        if ((read || write) && wait) p.stats.wait_cycles += 1;
        if (!p.reads.empty() && !pin.readdatavalid) p.stats.data_wait_cycles += 1;
        if (read && !wait) {
            check_burst(p, "read", pin.address, pin.burstcount);
            p.reads.push_back({pin.address, pin.burstcount, cycle_ + cfg_.latency});
            p.stats.read_bursts += 1;
        }
        if (write && !wait) {
            if (p.wleft == 0) {
                check_burst(p, "write", pin.address, pin.burstcount);
                p.waddress = pin.address;
                p.wcount = pin.burstcount;
                p.wleft = pin.burstcount;
                p.wnext = pin.address;
                p.stats.write_bursts += 1;
            } else if (pin.address != p.waddress || pin.burstcount != p.wcount) {
                violation(p, "write beat with address " + hex(pin.address) + ", burstcount " +
                                 std::to_string(pin.burstcount) + " inside the burst at " +
                                 hex(p.waddress) + " of " + std::to_string(p.wcount) +
                                 " words (address and burstcount must stay)");
            }
            uint8_t* dst = &mem_[p.wnext - cfg_.base];
            for (unsigned b = 0; b < p.bytes; ++b) {
                if (pin.byteenable >> b & 1) {
                    dst[b] = pin.writedata[b];
                    p.stats.bytes_written += 1;
                }
            }
            p.stats.write_beats += 1;
            p.wnext += p.bytes;
            p.wleft -= 1;
            // a beat presented after drive() saw no write took no reservation: charge
            // it now (the bucket goes negative and later transfers wait for it)
            if (!p.reserved) tokens_ -= p.bytes;
            p.reserved = false;
        }
        if (p.reserved) tokens_ += p.bytes;  // reserved for a beat the edge did not take
        p.reserved = false;
        p.held_valid = (read || write) && wait;
        if (p.held_valid) {
            p.held.read = read;
            p.held.write = write;
            p.held.address = pin.address;
            p.held.burstcount = pin.burstcount;
            p.held.byteenable = pin.byteenable;
            std::memcpy(p.held.writedata, pin.writedata, sizeof p.held.writedata);
        }
    }

    std::vector<uint8_t> mem_;
    DramConfig cfg_;
    DramRng rng_;
    std::vector<Port> ports_;
    Failure failure_;
    double tokens_ = 0.0;
    double cap_ = 0.0;
    int rr_ = 0;
    uint64_t cycle_ = 0;
    uint64_t guard_lo_ = 0, guard_hi_ = 0;
};

}  // namespace gn
