package svc

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/hibiken/asynq"
)

// DefaultRedisMaster is the master name asked of the sentinels when
// CAPSTAN_REDIS_MASTER is unset: the name redis-sentinel's own example
// configuration monitors.
const DefaultRedisMaster = "mymaster"

// RedisSentinel holds the settings that reach Redis through Redis Sentinel
// instead of one address. Every service embeds it through Common.
//
// Redis Cluster is not supported (docs/operations.md says why): asynq keeps
// every key of a queue under one hash tag, asynq:{<queue>}:…, so that its Lua
// scripts, which move a task between a queue's lists and sets atomically,
// run on one node. A queue cannot be spread over a cluster, and Capstan's
// load is in two queues, scheduler and abort: a cluster would put it on the
// one or two nodes holding them, and add the cross-slot cases asynq's own
// documentation warns some of its scripts are not written for. Sentinel
// keeps one primary holding every key, which is what those scripts assume.
type RedisSentinel struct {
	// Sentinels are the host:port addresses of the Redis Sentinels, comma
	// separated. When set, the services ask them for the current master of
	// Master (and follow a failover), and CAPSTAN_REDIS_ADDR is ignored.
	// Env CAPSTAN_REDIS_SENTINELS, default unset (one Redis at
	// CAPSTAN_REDIS_ADDR).
	Sentinels []string `env:"CAPSTAN_REDIS_SENTINELS" envSeparator:","`
	// Master is the name of the master the sentinels monitor. Env
	// CAPSTAN_REDIS_MASTER, default mymaster.
	Master string `env:"CAPSTAN_REDIS_MASTER"`
	// SentinelPassword authenticates to the sentinels (requirepass in
	// sentinel.conf). Env CAPSTAN_REDIS_SENTINEL_PASSWORD, default none.
	SentinelPassword string `env:"CAPSTAN_REDIS_SENTINEL_PASSWORD"`
	// Password authenticates to Redis itself, the one server or the master
	// the sentinels name. Env CAPSTAN_REDIS_PASSWORD, default none.
	Password string `env:"CAPSTAN_REDIS_PASSWORD"`
}

// RedisURL is CAPSTAN_REDIS_URL parsed by asynq.ParseRedisURI:
// redis://[:password@]host:port[/db], rediss://… for TLS (the server name
// checked against the host), redis-socket://[:password@]path[?db=n] or
// redis-sentinel://[:password@]host:port,…[?master=name]. A malformed URL
// fails the environment's parsing, so a service reports it at start.
type RedisURL struct {
	opt asynq.RedisConnOpt
}

// UnmarshalText parses a Redis URL (see RedisURL). Errors: asynq's, naming
// what is wrong (scheme, db, host).
func (u *RedisURL) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		u.opt = nil
		return nil
	}
	opt, err := asynq.ParseRedisURI(string(text))
	if err != nil {
		return fmt.Errorf("CAPSTAN_REDIS_URL: %w", err)
	}
	u.opt = opt
	return nil
}

// Redis returns the asynq connection options: CAPSTAN_REDIS_URL's when it
// is set (password, TLS, db from the URL); else through the sentinels when
// Sentinels is set (asynq.RedisFailoverClientOpt, which follows a
// failover), else the one server at RedisAddr; both use RedisDB.
func (c Common) Redis() asynq.RedisConnOpt {
	if c.RedisURL.opt != nil {
		return c.RedisURL.opt
	}
	var sentinels []string
	for _, s := range c.Sentinels {
		if s = strings.TrimSpace(s); s != "" {
			sentinels = append(sentinels, s)
		}
	}
	if len(sentinels) == 0 {
		return asynq.RedisClientOpt{Addr: c.RedisAddr, DB: c.RedisDB, Password: c.Password}
	}
	return asynq.RedisFailoverClientOpt{
		MasterName:       cmp.Or(c.Master, DefaultRedisMaster),
		SentinelAddrs:    sentinels,
		SentinelPassword: c.SentinelPassword,
		Password:         c.Password,
		DB:               c.RedisDB,
	}
}
