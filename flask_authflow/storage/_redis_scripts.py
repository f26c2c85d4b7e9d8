"""The Lua scripts of the Redis session store (private to
:mod:`flask_authflow.storage._redis_sessions`, whose docstring describes the layout).

Each write that must not bring a revoked session back is one script, so Redis runs its
check and its write with nothing in between; the read of every request is one script too
(the touch folded in).
"""

from __future__ import annotations

__all__ = ["DELETE", "DELETE_INDEX", "DELETE_TENANT", "LIST", "PURGE", "READ_TOUCH", "SAVE", "TOUCH"]

# Shared by the scripts: ``drop(key)`` removes a record and its entries in the index sets
# it names; ``live(key)`` is true while the record exists and its expiry is after ``now``.
# ARGV[1] is always now (µs) and ARGV[2] the record key prefix (``<prefix>s:``).
_LUA_COMMON = """
local now = tonumber(ARGV[1])
local record_prefix = ARGV[2]
local skip = string.len(record_prefix)
local function live(key)
  local e = redis.call('HGET', key, 'e')
  return e and tonumber(e) > now
end
local function drop(key)
  local idx = redis.call('HMGET', key, 'u', 'f')
  local member = string.sub(key, skip + 1)
  if idx[1] then redis.call('SREM', idx[1], member) end
  if idx[2] then redis.call('SREM', idx[2], member) end
  return redis.call('DEL', key)
end
-- Deletes every record of an index set whose field (u or f) names that set, then the
-- set; returns how many of them were live.
local function drop_index(index, field)
  local removed = 0
  for _, member in ipairs(redis.call('SMEMBERS', index)) do
    local key = record_prefix .. member
    local row = redis.call('HMGET', key, 'e', field)
    if row[2] == index then
      if tonumber(row[1]) > now then removed = removed + 1 end
      drop(key)
    end
  end
  redis.call('DEL', index)
  return removed
end
-- Adds member to the set index, which then lives at least ttl ms more. Housekeeping:
-- two members at random whose key (prefix .. member) is gone are dropped, so a set
-- never grows much past twice its live members.
local function add(index, member, ttl, prefix)
  redis.call('SADD', index, member)
  if redis.call('PTTL', index) < ttl then redis.call('PEXPIRE', index, ttl) end
  for _, other in ipairs(redis.call('SRANDMEMBER', index, 2)) do
    if redis.call('EXISTS', prefix .. other) == 0 then redis.call('SREM', index, other) end
  end
end
"""

# KEYS[1] = the record's key, KEYS[2..] = the keys of the ids it replaces.
# ARGV[3] = '1' for an update of an existing session, ARGV[4] = expiry (µs),
# ARGV[5] = TTL (ms), ARGV[6] = sealed record, ARGV[7] / ARGV[8] = user / federation
# index key or '', ARGV[9] = the tenant's set of user sets ('' without a user),
# ARGV[10] = the last-seen time (µs).
# Returns 1 if written, 0 if the session was revoked (nothing written).
SAVE = (
    _LUA_COMMON
    + """
if ARGV[3] == '1' then
  if not live(KEYS[1]) then return 0 end
else
  for i = 2, #KEYS do
    if not live(KEYS[i]) then return 0 end
  end
  for i = 2, #KEYS do drop(KEYS[i]) end
end
drop(KEYS[1])
local ttl = tonumber(ARGV[5])
local member = string.sub(KEYS[1], skip + 1)
redis.call('HSET', KEYS[1], 'd', ARGV[6], 'e', ARGV[4], 'l', ARGV[10])
for slot = 7, 8 do
  local index = ARGV[slot]
  if index ~= '' then
    redis.call('HSET', KEYS[1], slot == 7 and 'u' or 'f', index)
    add(index, member, ttl, record_prefix)
  end
end
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 't', ARGV[9])
  add(ARGV[9], ARGV[7], ttl, '')
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
"""
)

# KEYS[1] = a record's key; ARGV[3] = its new expiry, ARGV[4] = the last-seen time (µs),
# ARGV[5] = the remaining lifetime (ms), ARGV[6] = the tenant's index set ('' for none).
# The touch: the live record's expiry and last-seen fields and its TTL, nothing else (the
# sealed record is not written); the index sets it is in live at least as long. 1 or 0.
TOUCH = (
    _LUA_COMMON
    + """
if not live(KEYS[1]) then return 0 end
local ttl = tonumber(ARGV[5])
redis.call('HSET', KEYS[1], 'e', ARGV[3], 'l', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ttl)
local idx = redis.call('HMGET', KEYS[1], 'u', 'f')
if ARGV[6] ~= '' then
  idx[3] = ARGV[6]
  redis.call('HSET', KEYS[1], 't', ARGV[6])
end
for _, index in pairs(idx) do
  if index and redis.call('PTTL', index) < ttl then redis.call('PEXPIRE', index, ttl) end
end
return 1
"""
)

# KEYS[1] = a record's key; ARGV[3] = when the session is due (µs): touched when its
# last-seen time is at or before it; ARGV[4] = the last-seen time a touch writes (µs),
# ARGV[5] = the expiry it writes unless the stored one is later (µs).
# The read of every request, with the touch folded in: {sealed record, last seen, expiry,
# 1 touched / 0 not due / -1 a record written before the 'l' and 't' fields (the caller
# decides)} for a live record, nil otherwise. A touch is the TOUCH script's writes.
READ_TOUCH = (
    _LUA_COMMON
    + """
local row = redis.call('HMGET', KEYS[1], 'd', 'e', 'l', 'u', 't', 'f')
if not row[1] or not row[2] or tonumber(row[2]) <= now then return false end
if not row[3] or (row[4] and not row[5]) then return {row[1], '', row[2], -1} end
if tonumber(row[3]) > tonumber(ARGV[3]) then return {row[1], row[3], row[2], 0} end
local e = row[2]
if tonumber(e) < tonumber(ARGV[5]) then e = ARGV[5] end
local ttl = math.max(1, math.ceil((tonumber(e) - now) / 1000))
redis.call('HSET', KEYS[1], 'e', e, 'l', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ttl)
for slot = 4, 6 do
  local index = row[slot]
  if index and redis.call('PTTL', index) < ttl then redis.call('PEXPIRE', index, ttl) end
end
return {row[1], row[3], row[2], 1}
"""
)

# KEYS[1] = a record's key. Returns how many keys were deleted (0 or 1).
DELETE = _LUA_COMMON + "return drop(KEYS[1])\n"

# KEYS[1] = an index set; ARGV[3] = the record field naming it ('u' or 'f'), ARGV[4] = for
# a user set, its tenant's set (which then forgets it). Deletes every record of the set and
# the set; returns how many of them were live.
DELETE_INDEX = (
    _LUA_COMMON
    + """
local removed = drop_index(KEYS[1], ARGV[3])
if ARGV[4] ~= '' then
  redis.call('SREM', ARGV[4], KEYS[1])
  if redis.call('SCARD', ARGV[4]) == 0 then redis.call('DEL', ARGV[4]) end
end
return removed
"""
)

# KEYS[1] = a tenant's set of user sets. Deletes every record of every one of them, the
# sets and the tenant's set; returns how many of the records were live.
DELETE_TENANT = (
    _LUA_COMMON
    + """
local removed = 0
for _, index in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  removed = removed + drop_index(index, 'u')
end
redis.call('DEL', KEYS[1])
return removed
"""
)

# KEYS[1] = a user index set. Returns {member, sealed record, ...} of its live records,
# and drops the members whose record is gone.
LIST = (
    _LUA_COMMON
    + """
local found = {}
for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local row = redis.call('HMGET', record_prefix .. member, 'd', 'e', 'u', 'l')
  if not row[1] then
    redis.call('SREM', KEYS[1], member)
  elseif row[3] == KEYS[1] and tonumber(row[2]) > now then
    table.insert(found, member)
    table.insert(found, row[1])
    table.insert(found, row[4] or '')
  end
end
return found
"""
)

# KEYS = record keys. Deletes those whose expiry is not after now; returns how many.
PURGE = (
    _LUA_COMMON
    + """
local removed = 0
for _, key in ipairs(KEYS) do
  local e = redis.call('HGET', key, 'e')
  if e and tonumber(e) <= now then
    drop(key)
    removed = removed + 1
  end
end
return removed
"""
)
