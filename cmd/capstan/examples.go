package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// examples are the Example blocks of the commands that do not set their
// own, by command path without "capstan " ("run get"). setExamples applies
// them; a test fails on any command left without one.
var examples = map[string]string{
	"": `  capstan run create -f workflow.yaml --wait
  capstan run list --since 1h
  CAPSTAN_API=https://capstan.example.com capstan -p shop -d prod workers`,
	"aborts": `  capstan aborts
  capstan aborts --state needs_intervention -o json`,
	"action":       `  capstan action get r1 build`,
	"action abort": `  capstan action abort r1 build --reason "wrong branch"`,
	"action get": `  capstan action get r1 build
  capstan action get r1 build --cursor CURSOR -o json`,
	"approve": `  capstan approve r1 gate --comment "looks good"`,
	"cache":   `  capstan cache list --run r1`,
	"cache delete": `  capstan cache delete 3f1c...e9
  capstan cache delete --version v2 --created-before 2026-01-01T00:00:00Z
  capstan cache delete --all`,
	"cache list": `  capstan cache list
  capstan cache list --step compile --version v2`,
	"concurrency":      `  capstan concurrency list`,
	"concurrency list": `  capstan concurrency list -o json`,
	"event":            `  capstan event publish order.created --payload '{"amount": 120}'`,
	"event get":        `  capstan event get 01J9Z3...`,
	"event publish": `  capstan event publish order.created --payload '{"amount": 120}'
  capstan event publish order.created --id order-42 --payload @order.json`,
	"fair-share":     `  capstan -p shop fair-share get`,
	"fair-share get": `  capstan -p shop fair-share get`,
	"fair-share set": `  capstan -p shop fair-share set --weight 2`,
	"logs": `  capstan logs r1 build
  capstan logs -f r1 build`,
	"rate-limit":        `  capstan rate-limit list`,
	"rate-limit delete": `  capstan rate-limit delete github-api`,
	"rate-limit get":    `  capstan rate-limit get github-api`,
	"rate-limit list":   `  capstan rate-limit list -o json`,
	"rate-limit put":    `  capstan rate-limit put github-api --limit 100 --per 1m`,
	"reject":            `  capstan reject r1 gate --comment "not in the freeze"`,
	"run": `  capstan run create -f workflow.yaml --wait
  capstan run list --phase FAILED --since 24h`,
	"run abort": `  capstan run abort r1 --reason "superseded"`,
	"run create": `  capstan run create -f workflow.yaml
  capstan run create -f workflow.yaml --wait --timeout 30m
  capstan run create --workflow greeter@2 --param WHO=world --watch`,
	"run delete": `  capstan run delete r1`,
	"run get": `  capstan run get r1
  capstan run get r1 -o json | jq .phase
  capstan run get r1 --archived`,
	"run list": `  capstan run list
  capstan run list --phase FAILED --since 24h -o wide
  capstan run list --name nightly --all -o name
  capstan run list -w`,
	"run restart": `  capstan run restart r1 --from-step deploy`,
	"run resume":  `  capstan run resume r1`,
	"run suspend": `  capstan run suspend r1`,
	"run wait": `  capstan run wait r1 --timeout 10m
  capstan run wait r1 --expect ABORTED
  capstan run wait r1 --until-step gate=PAUSED`,
	"run wait-abort": `  capstan run wait-abort r1 --timeout 2m`,
	"run watch":      `  capstan run watch r1`,
	"schedule":       `  capstan schedule create -f nightly.yaml`,
	"schedule backfill": `  capstan schedule backfill nightly --start 2026-01-01 --end 2026-01-07
  capstan schedule backfill nightly --start 2026-01-01T00:00:00Z --end 2026-01-02T00:00:00Z --overlap allow_all`,
	"schedule create":  `  capstan schedule create -f nightly.yaml`,
	"schedule delete":  `  capstan schedule delete nightly`,
	"schedule get":     `  capstan schedule get nightly`,
	"schedule list":    `  capstan schedule list -o json`,
	"schedule pause":   `  capstan schedule pause nightly`,
	"schedule trigger": `  capstan schedule trigger nightly --overlap buffer_one`,
	"schedule unpause": `  capstan schedule unpause nightly`,
	"settings":         `  capstan -p shop settings get`,
	"settings get":     `  capstan -p shop settings get -o json`,
	"settings set":     `  capstan -p shop settings set --retention-after-success 72h --retention-after-failure 720h`,
	"token":            `  capstan token create ci --role writer`,
	"token create": `  capstan token create ci --role writer --ttl 720h
  capstan token create shop-reader --role reader --project shop`,
	"token list":     `  capstan token list`,
	"token revoke":   `  capstan token revoke 6f1c1a43-44d4-4a55-9d0e-7f0a1f9c2b10`,
	"trigger":        `  capstan trigger create -f on-order.yaml`,
	"trigger create": `  capstan trigger create -f on-order.yaml`,
	"trigger delete": `  capstan trigger delete on-order`,
	"trigger get":    `  capstan trigger get on-order`,
	"trigger list":   `  capstan trigger list`,
	"workers": `  capstan workers
  capstan workers -o json | jq '.workers[].id'`,
	"workflow":        `  capstan workflow push -f greeter.yaml`,
	"workflow delete": `  capstan workflow delete greeter`,
	"workflow get": `  capstan workflow get greeter
  capstan workflow get greeter@1 -o json`,
	"workflow list":     `  capstan workflow list`,
	"workflow push":     `  capstan workflow push -f greeter.yaml`,
	"workflow versions": `  capstan workflow versions greeter`,
	"completion": `  source <(capstan completion bash)
  capstan completion zsh > "${fpath[1]}/_capstan"`,
	"completion bash":       `  source <(capstan completion bash)`,
	"completion zsh":        `  capstan completion zsh > "${fpath[1]}/_capstan"`,
	"completion fish":       `  capstan completion fish > ~/.config/fish/completions/capstan.fish`,
	"completion powershell": `  capstan completion powershell | Out-String | Invoke-Expression`,
	"help":                  `  capstan help run create`,
}

// setExamples gives cmd and its subcommands their examples, keeping an
// Example a command sets itself.
func setExamples(cmd *cobra.Command) {
	path := strings.TrimPrefix(strings.TrimPrefix(cmd.CommandPath(), "capstan"), " ")
	if cmd.Example == "" {
		cmd.Example = examples[path]
	}
	for _, sub := range cmd.Commands() {
		setExamples(sub)
	}
}
