-- Wireshark dissector for Braid wire format v1 (UDP port 4747).
--
-- Usage:  wireshark -X lua_script:tools/wireshark/braid.lua capture.pcap
--         tshark -X lua_script:tools/wireshark/braid.lua -r capture.pcap -Y braid.trimmed==\"fabric\"
-- or copy this file to ~/.local/lib/wireshark/plugins/.
--
-- The layout follows wire/packets.py (the code is the truth): a 16-byte common
-- header, a type-specific body, a 16-byte header tag, then (DATA only) the
-- payload. A DATA packet whose header announces payload bytes but which ends
-- right after its tag was trimmed by a switch; the IP DSCP tells where
-- (40: in the fabric, 41: at the last hop). Field names match the Python
-- decoder: braid.type, braid.psn, braid.ev, braid.plane, braid.trimmed, ...

local braid = Proto("braid", "Braid multipath transport")

local PORT = 4747
local HEADER_TAG_LEN = 16
local PAYLOAD_TAG_LEN = 16

local types = {
    [1] = "INIT", [2] = "ACCEPT", [3] = "DATA", [4] = "SACK", [5] = "NACK",
    [6] = "PROBE", [7] = "PROBE_ACK", [8] = "CLOSE", [9] = "RESET", [10] = "UNKNOWN_CONN",
}
-- v1 header length in words (common header + body, tag excluded) per type
local header_words = { [1] = 12, [2] = 16, [3] = 13, [4] = 13, [5] = 9, [6] = 9, [7] = 9,
                       [8] = 6, [9] = 6, [10] = 7 }
local nack_reasons = {
    [1] = "TRIMMED", [2] = "TRIMMED_LAST_HOP", [3] = "OUT_OF_WINDOW", [4] = "NO_BUFFER",
    [5] = "NO_RESOURCE", [6] = "NO_BITMAP", [7] = "CLOSING", [8] = "UNEXPECTED",
}
local close_reasons = {
    [0] = "NORMAL", [1] = "IDLE", [2] = "RETRY_BUDGET", [3] = "PROTOCOL_ERROR",
    [4] = "SHUTDOWN", [5] = "AUTH_FAILED",
}
local dscp_names = { [10] = "DATA", [12] = "RETX", [46] = "CONTROL", [40] = "TRIMMED",
                     [41] = "TRIMMED_LAST_HOP" }

local f = braid.fields
f.version = ProtoField.uint8("braid.version", "Version")
f.type = ProtoField.uint8("braid.type", "Type", base.DEC, types)
f.flags = ProtoField.uint8("braid.flags", "Flags", base.HEX)
f.flag_retx = ProtoField.bool("braid.flags.retx", "RETX (retransmission)", 8, nil, 0x01)
f.flag_ack_req = ProtoField.bool("braid.flags.ack_req", "ACK_REQ", 8, nil, 0x02)
f.flag_last = ProtoField.bool("braid.flags.last", "LAST (end of message)", 8, nil, 0x04)
f.flag_ecn_echo = ProtoField.bool("braid.flags.ecn_echo", "ECN_ECHO", 8, nil, 0x08)
f.flag_plaintext = ProtoField.bool("braid.flags.plaintext", "PLAINTEXT (insecure)", 8, nil, 0x80)
f.header_words = ProtoField.uint8("braid.header_words", "Header length (words)")
f.dcid = ProtoField.uint32("braid.dcid", "Destination connection id", base.HEX)
f.epoch = ProtoField.uint16("braid.epoch", "Key epoch")
f.counter = ProtoField.uint64("braid.counter", "Packet counter (48 bits)")
f.psn = ProtoField.uint32("braid.psn", "PSN")
f.ev = ProtoField.uint32("braid.ev", "EV")
f.plane = ProtoField.uint8("braid.plane", "Plane")
f.reserved = ProtoField.bytes("braid.reserved", "Reserved")
f.payload_len = ProtoField.uint16("braid.payload_len", "Payload length")
f.msg_id = ProtoField.uint32("braid.msg_id", "Message id")
f.msg_offset = ProtoField.uint64("braid.msg_offset", "Message offset")
f.msg_len = ProtoField.uint64("braid.msg_len", "Message length")
f.timestamp = ProtoField.uint32("braid.timestamp", "Timestamp")
f.cum_psn = ProtoField.uint32("braid.cum_psn", "Cumulative PSN")
f.bitmap_base = ProtoField.uint32("braid.bitmap_base", "Bitmap base PSN")
f.bitmap = ProtoField.uint64("braid.bitmap", "SACK bitmap", base.HEX)
f.ack_psn = ProtoField.uint32("braid.ack_psn", "Acknowledged PSN (trigger)")
f.echo_ev = ProtoField.uint32("braid.echo_ev", "Echoed EV")
f.echo_ts = ProtoField.uint32("braid.echo_ts", "Echoed timestamp")
f.rwnd = ProtoField.uint32("braid.rwnd", "Receive window")
f.ce_count = ProtoField.uint16("braid.ce_count", "CE count")
f.nack_reason = ProtoField.uint8("braid.nack_reason", "NACK reason", base.DEC, nack_reasons)
f.probe_id = ProtoField.uint32("braid.probe_id", "Probe id")
f.src_cid = ProtoField.uint32("braid.src_cid", "Source connection id", base.HEX)
f.nonce = ProtoField.bytes("braid.nonce", "Nonce")
f.echo_nonce = ProtoField.bytes("braid.echo_nonce", "Echoed nonce")
f.planes = ProtoField.uint8("braid.planes", "Planes")
f.evs = ProtoField.uint16("braid.evs", "EVs")
f.mtu = ProtoField.uint16("braid.mtu", "MTU")
f.close_reason = ProtoField.uint16("braid.close_reason", "Close reason", base.DEC, close_reasons)
f.final_psn = ProtoField.uint32("braid.final_psn", "Final PSN")
f.unknown_cid = ProtoField.uint32("braid.unknown_cid", "Unknown connection id", base.HEX)
f.echo_counter = ProtoField.uint64("braid.echo_counter", "Echoed counter")
f.ext = ProtoField.bytes("braid.ext", "Header extension")
f.tag = ProtoField.bytes("braid.tag", "Header tag")
f.payload = ProtoField.bytes("braid.payload", "Payload")
f.trimmed = ProtoField.string("braid.trimmed", "Trimmed")

local ef = braid.experts
ef.trimmed = ProtoExpert.new("braid.trimmed.expert", "Payload trimmed by a switch",
                             expert.group.SEQUENCE, expert.severity.NOTE)
ef.malformed = ProtoExpert.new("braid.malformed", "Not a Braid v1 packet",
                               expert.group.MALFORMED, expert.severity.ERROR)

local ip_dscp = Field.new("ip.dsfield.dscp")
local ipv6_dscp = Field.new("ipv6.tclass.dscp")

local function current_dscp()
    local v = ip_dscp()
    if v == nil then v = ipv6_dscp() end
    if v == nil then return nil end
    return v.value
end

local function flag_names(flags)
    local names = {}
    local bits = { { 0x01, "RETX" }, { 0x02, "ACK_REQ" }, { 0x04, "LAST" },
                   { 0x08, "ECN_ECHO" }, { 0x80, "PLAINTEXT" } }
    for _, b in ipairs(bits) do
        if bit.band(flags, b[1]) ~= 0 then names[#names + 1] = b[2] end
    end
    if #names == 0 then return "-" end
    return table.concat(names, "|")
end

-- Body dissectors: add fields at offset 16 and return a summary for the Info column.
local body = {}

body[3] = function(tvb, t, words)  -- DATA
    local o = 16
    t:add(f.psn, tvb(o, 4)); t:add(f.ev, tvb(o + 4, 4)); t:add(f.plane, tvb(o + 8, 1))
    t:add(f.reserved, tvb(o + 9, 1)); t:add(f.payload_len, tvb(o + 10, 2))
    t:add(f.msg_id, tvb(o + 12, 4)); t:add(f.msg_offset, tvb(o + 16, 8))
    t:add(f.msg_len, tvb(o + 24, 8)); t:add(f.timestamp, tvb(o + 32, 4))
    return string.format("psn=%d ev=%d plane=%d msg=%d@%s/%s len=%d", tvb(o, 4):uint(),
        tvb(o + 4, 4):uint(), tvb(o + 8, 1):uint(), tvb(o + 12, 4):uint(),
        tostring(tvb(o + 16, 8):uint64()), tostring(tvb(o + 24, 8):uint64()),
        tvb(o + 10, 2):uint())
end

body[4] = function(tvb, t)  -- SACK
    local o = 16
    t:add(f.cum_psn, tvb(o, 4)); t:add(f.bitmap_base, tvb(o + 4, 4))
    t:add(f.bitmap, tvb(o + 8, 8)); t:add(f.ack_psn, tvb(o + 16, 4))
    t:add(f.echo_ev, tvb(o + 20, 4)); t:add(f.echo_ts, tvb(o + 24, 4))
    t:add(f.rwnd, tvb(o + 28, 4)); t:add(f.ce_count, tvb(o + 32, 2))
    t:add(f.plane, tvb(o + 34, 1)); t:add(f.reserved, tvb(o + 35, 1))
    return string.format("cum=%d ack_psn=%d echo_ev=%d plane=%d", tvb(o, 4):uint(),
        tvb(o + 16, 4):uint(), tvb(o + 20, 4):uint(), tvb(o + 34, 1):uint())
end

body[5] = function(tvb, t)  -- NACK
    local o = 16
    t:add(f.psn, tvb(o, 4)); t:add(f.echo_ev, tvb(o + 4, 4)); t:add(f.cum_psn, tvb(o + 8, 4))
    t:add(f.echo_ts, tvb(o + 12, 4)); t:add(f.nack_reason, tvb(o + 16, 1))
    t:add(f.plane, tvb(o + 17, 1)); t:add(f.reserved, tvb(o + 18, 2))
    local r = tvb(o + 16, 1):uint()
    return string.format("psn=%d reason=%s echo_ev=%d plane=%d", tvb(o, 4):uint(),
        nack_reasons[r] or ("UNKNOWN_" .. r), tvb(o + 4, 4):uint(), tvb(o + 17, 1):uint())
end

local function probe(tvb, t)  -- PROBE and PROBE_ACK
    local o = 16
    t:add(f.probe_id, tvb(o, 4)); t:add(f.ev, tvb(o + 4, 4)); t:add(f.psn, tvb(o + 8, 4))
    t:add(f.timestamp, tvb(o + 12, 4)); t:add(f.plane, tvb(o + 16, 1))
    t:add(f.reserved, tvb(o + 17, 3))
    return string.format("id=%d psn=%d ev=%d plane=%d", tvb(o, 4):uint(), tvb(o + 8, 4):uint(),
        tvb(o + 4, 4):uint(), tvb(o + 16, 1):uint())
end
body[6] = probe
body[7] = probe

local function handshake(tvb, t, accept)
    local o = 16
    t:add(f.src_cid, tvb(o, 4)); t:add(f.nonce, tvb(o + 4, 16))
    local p = o + 20
    if accept then t:add(f.echo_nonce, tvb(p, 16)); p = p + 16 end
    t:add(f.planes, tvb(p, 1)); t:add(f.reserved, tvb(p + 1, 1)); t:add(f.evs, tvb(p + 2, 2))
    t:add(f.mtu, tvb(p + 4, 2)); t:add(f.reserved, tvb(p + 6, 2))
    t:add(f.timestamp, tvb(p + 8, 4))
    return string.format("scid=0x%x planes=%d evs=%d mtu=%d", tvb(o, 4):uint(),
        tvb(p, 1):uint(), tvb(p + 2, 2):uint(), tvb(p + 4, 2):uint())
end
body[1] = function(tvb, t) return handshake(tvb, t, false) end
body[2] = function(tvb, t) return handshake(tvb, t, true) end

local function close(tvb, t)  -- CLOSE and RESET
    local o = 16
    t:add(f.close_reason, tvb(o, 2)); t:add(f.reserved, tvb(o + 2, 2))
    t:add(f.final_psn, tvb(o + 4, 4))
    local r = tvb(o, 2):uint()
    return string.format("reason=%s final_psn=%d", close_reasons[r] or ("UNKNOWN_" .. r),
        tvb(o + 4, 4):uint())
end
body[8] = close
body[9] = close

body[10] = function(tvb, t)  -- UNKNOWN_CONN: a restarted host lost this connection
    local o = 16
    t:add(f.unknown_cid, tvb(o, 4)); t:add(f.reserved, tvb(o + 4, 2))
    t:add(f.echo_counter, tvb(o + 6, 6))
    return string.format("unknown_cid=0x%x echo_counter=%s", tvb(o, 4):uint(),
        tostring(tvb(o + 6, 6):uint64()))
end

function braid.dissector(tvb, pinfo, tree)
    local n = tvb:len()
    if n < 16 then return 0 end
    pinfo.cols.protocol = "Braid"
    local t = tree:add(braid, tvb(), "Braid")
    local ver, ptype, words = tvb(0, 1):uint(), tvb(1, 1):uint(), tvb(3, 1):uint()
    t:add(f.version, tvb(0, 1))
    local min_words = header_words[ptype]
    if ver ~= 1 or min_words == nil or words < min_words or words > 64
            or n < words * 4 + HEADER_TAG_LEN then
        t:add_proto_expert_info(ef.malformed)
        pinfo.cols.info = "Braid MALFORMED"
        return n
    end
    t:add(f.type, tvb(1, 1))
    local flags = tvb(2, 1):uint()
    local ft = t:add(f.flags, tvb(2, 1))
    ft:append_text(" (" .. flag_names(flags) .. ")")
    ft:add(f.flag_retx, tvb(2, 1)); ft:add(f.flag_ack_req, tvb(2, 1))
    ft:add(f.flag_last, tvb(2, 1)); ft:add(f.flag_ecn_echo, tvb(2, 1))
    ft:add(f.flag_plaintext, tvb(2, 1))
    t:add(f.header_words, tvb(3, 1))
    t:add(f.dcid, tvb(4, 4))
    t:add(f.epoch, tvb(8, 2))
    t:add(f.counter, tvb(10, 6), UInt64(tvb(12, 4):uint(), tvb(10, 2):uint()))
    local summary = body[ptype](tvb, t, words)
    local hlen = words * 4
    local std = min_words * 4
    if hlen > std then t:add(f.ext, tvb(std, hlen - std)) end
    t:add(f.tag, tvb(hlen, HEADER_TAG_LEN))
    local rest = n - hlen - HEADER_TAG_LEN
    local trimmed = "no"
    if ptype == 3 then
        local plen = tvb(26, 2):uint()
        if rest == 0 and plen > 0 then
            local dscp = current_dscp()
            if dscp == 40 then trimmed = "fabric"
            elseif dscp == 41 then trimmed = "last-hop"
            else trimmed = "yes" end
        elseif rest > 0 then
            t:add(f.payload, tvb(hlen + HEADER_TAG_LEN, rest))
        end
    elseif rest > 0 then
        t:add(f.payload, tvb(hlen + HEADER_TAG_LEN, rest))
    end
    local tr = t:add(f.trimmed, trimmed)
    tr:set_generated()
    if trimmed ~= "no" then
        tr:add_proto_expert_info(ef.trimmed, "Payload trimmed (" .. trimmed .. ")")
    end
    local name = types[ptype]
    t:append_text(", " .. name .. " " .. summary)
    local info = name .. " " .. summary .. " flags=" .. flag_names(flags)
    if trimmed ~= "no" then info = info .. " [TRIMMED " .. trimmed .. "]" end
    local dscp = current_dscp()
    if dscp ~= nil and dscp_names[dscp] then info = info .. " dscp=" .. dscp_names[dscp] end
    pinfo.cols.info = info
    return n
end

DissectorTable.get("udp.port"):add(PORT, braid)
