package svc

import (
	"fmt"
	"testing"

	"github.com/caarlos0/env/v11"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

func TestRedisOptions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		common Common
		want   asynq.RedisConnOpt
	}{
		"one address": {
			common: Common{RedisAddr: "redis:6379", RedisDB: 3, RedisSentinel: RedisSentinel{Password: "pw"}},
			want:   asynq.RedisClientOpt{Addr: "redis:6379", DB: 3, Password: "pw"},
		},
		"sentinels replace the address": {
			common: Common{RedisAddr: "redis:6379", RedisDB: 2, RedisSentinel: RedisSentinel{
				Sentinels: []string{"s1:26379", " s2:26379", "", "s3:26379"}, Master: "capstan",
				SentinelPassword: "spw", Password: "pw"}},
			want: asynq.RedisFailoverClientOpt{MasterName: "capstan", SentinelAddrs: []string{"s1:26379", "s2:26379", "s3:26379"},
				SentinelPassword: "spw", Password: "pw", DB: 2},
		},
		"the master name defaults to mymaster": {
			common: Common{RedisSentinel: RedisSentinel{Sentinels: []string{"s1:26379"}}},
			want:   asynq.RedisFailoverClientOpt{MasterName: DefaultRedisMaster, SentinelAddrs: []string{"s1:26379"}},
		},
		"blank sentinels are one address": {
			common: Common{RedisAddr: "127.0.0.1:56379", RedisSentinel: RedisSentinel{Sentinels: []string{" ", ""}, Master: "capstan"}},
			want:   asynq.RedisClientOpt{Addr: "127.0.0.1:56379"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.common.Redis())
		})
	}
}

// CAPSTAN_REDIS_URL, parsed with asynq.ParseRedisURI, replaces the address,
// the password and the database; rediss:// turns TLS on; a bad URL fails the
// environment's parsing.
func TestRedisURL(t *testing.T) {
	t.Parallel()
	parse := func(url string) (Common, error) {
		return env.ParseAsWithOptions[Common](env.Options{Environment: map[string]string{
			"CAPSTAN_REDIS_URL": url, "CAPSTAN_REDIS_ADDR": "ignored:1"}})
	}
	c, err := parse("redis://:s3cret@redis.internal:6380/4")
	require.NoError(t, err)
	require.Equal(t, asynq.RedisClientOpt{Addr: "redis.internal:6380", Password: "s3cret", DB: 4}, c.Redis())

	c, err = parse("rediss://:pw@redis.example.com:6380/1")
	require.NoError(t, err)
	opt, ok := c.Redis().(asynq.RedisClientOpt)
	require.True(t, ok)
	require.NotNil(t, opt.TLSConfig)
	require.Equal(t, "redis.example.com", opt.TLSConfig.ServerName)

	_, err = parse("http://redis:6379")
	require.ErrorContains(t, err, "CAPSTAN_REDIS_URL")
	c, err = parse("")
	require.NoError(t, err)
	require.Equal(t, asynq.RedisClientOpt{Addr: "ignored:1"}, c.Redis())

	// The real Redis, through a URL.
	rdb := redistest.New(t)
	c, err = parse(fmt.Sprintf("redis://%s/%d", rdb.Addr, rdb.DB))
	require.NoError(t, err)
	insp := asynq.NewInspector(c.Redis())
	defer insp.Close()
	_, err = insp.Queues()
	require.NoError(t, err)
}
