package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// slackEscape escapes the characters Slack reads as markup (links, mentions).
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// SignatureHeader carries "sha256=<hex HMAC-SHA256 of the body>" on generic webhooks
// whose Secret has an hmacKey.
const SignatureHeader = "X-Converge-Signature"

// webhookPayload is the JSON body of a generic webhook.
type webhookPayload struct {
	Message
	Text string `json:"text"`
}

// webhookRequest posts the message as JSON, signed with the hmacKey, authenticated with
// the token (Bearer) or username and password (basic).
func webhookRequest(p convergev1.NotificationProvider, c credentials, n notification) (*request, error) {
	addr, err := chatAddress(p, c)
	if err != nil {
		return nil, err
	}
	r, err := jsonRequest(addr, webhookPayload{Message: n.msg, Text: n.text})
	if err != nil {
		return nil, err
	}
	if c.hmacKey != "" {
		mac := hmac.New(sha256.New, []byte(c.hmacKey))
		mac.Write(r.body)
		r.header.Set(SignatureHeader, "sha256="+hex.EncodeToString(mac.Sum(nil)))
	}
	switch {
	case c.token != "":
		r.header.Set("Authorization", "Bearer "+c.token)
	case c.username != "":
		r.header.Set("Authorization", basicAuth(c.username, c.password))
	}
	return r, nil
}

// color of an event in chat attachments: green, red, orange, blue.
func color(e convergev1.NotificationEvent) (hex string, dec int) {
	switch e {
	case convergev1.EventSucceeded, convergev1.EventDriftCorrected:
		return "2EB67D", 0x2EB67D
	case convergev1.EventFailed, convergev1.EventStalled:
		return "E01E5A", 0xE01E5A
	case convergev1.EventRolledBack:
		return "ECB22E", 0xECB22E
	}
	return "36C5F0", 0x36C5F0
}

// chatRequest posts to a Slack, Microsoft Teams or Discord incoming webhook.
func chatRequest(p convergev1.NotificationProvider, c credentials, n notification) (*request, error) {
	addr, err := chatAddress(p, c)
	if err != nil {
		return nil, err
	}
	hexColor, decColor := color(n.msg.Event)
	switch p.Type {
	case convergev1.SlackProvider:
		// https://api.slack.com/messaging/webhooks: text is the fallback and notification
		// text; &, < and > are escaped so that a commit message cannot mention @channel.
		txt := slackEscape.Replace(n.text)
		return jsonRequest(addr, map[string]any{
			"text": txt,
			"attachments": []map[string]any{{"color": "#" + hexColor, "fallback": txt,
				"fields": []map[string]any{{"title": "Target", "value": n.msg.Namespace + "/" + n.msg.Target, "short": true},
					{"title": "Event", "value": string(n.msg.Event), "short": true}}}},
		})
	case convergev1.DiscordProvider:
		// Discord "Execute Webhook": content up to 2000 characters, embeds with a colour.
		return jsonRequest(addr, map[string]any{
			"content": n.text,
			"embeds": []map[string]any{{"title": n.msg.Namespace + "/" + n.msg.Target + ": " + string(n.msg.Event),
				"color": decColor}},
			"allowed_mentions": map[string]any{"parse": []string{}},
		})
	}
	// Teams (Workflows or incoming webhook): a message with an Adaptive Card attachment.
	return jsonRequest(addr, map[string]any{
		"type": "message",
		"attachments": []map[string]any{{
			"contentType": "application/vnd.microsoft.card.adaptive",
			"content": map[string]any{
				"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
				"type":    "AdaptiveCard", "version": "1.4",
				"body": []map[string]any{
					{"type": "TextBlock", "text": n.msg.Namespace + "/" + n.msg.Target + ": " + phrase(n.msg.Event),
						"weight": "Bolder", "wrap": true},
					{"type": "TextBlock", "text": n.text, "wrap": true},
				},
			},
		}},
	})
}
