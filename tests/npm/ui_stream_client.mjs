// A chat front end's side of silica serve's AI SDK UI message stream, read with the `ai`
// package's own transport (DefaultChatTransport), parser (readUIMessageStream) and chat
// logic (AbstractChat, what useChat is built on). Prints one JSON object on stdout.
//
//   node ui_stream_client.mjs send   URL TOKEN CHAT_ID TEXT [DATA_URL MEDIA_TYPE]
//   node ui_stream_client.mjs resume URL TOKEN CHAT_ID
//   node ui_stream_client.mjs chat   URL TOKEN CHAT_ID TEXT approve|deny
//
// send, resume: {"chunks": [chunk types], "message": the UIMessage made, "errors": [...]};
//   resume prints {"resumed": false} when the daemon answers 204 (no turn runs).
// chat: sends TEXT, answers every approval request (approve or deny) as a person would with
//   addToolApprovalResponse, lets the chat send the answer by itself
//   (lastAssistantMessageIsCompleteWithApprovalResponses), and prints {"messages", "status",
//   "errors", "requests"} once the chat is ready again.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
} from 'ai';

const [mode, url, token, chatId, ...rest] = process.argv.slice(2);
const requests = [];
const transport = new DefaultChatTransport({
  api: `${url}/api/chat`,
  headers: { Authorization: `Bearer ${token}` },
  fetch: async (input, init) => {
    requests.push({ method: init?.method ?? 'GET', body: init?.body ? JSON.parse(init.body) : null });
    return fetch(input, init);
  },
});

function userMessage(text, dataUrl, mediaType) {
  const parts = [{ type: 'text', text }];
  if (dataUrl) parts.push({ type: 'file', url: dataUrl, mediaType, filename: 'sent.png' });
  return { id: `user-${Date.now()}`, role: 'user', parts };
}

async function read(stream) {
  const [forTypes, forMessage] = stream.tee();
  const chunks = [];
  const errors = [];
  const types = (async () => {
    for await (const chunk of forTypes) chunks.push(chunk.type);
  })();
  let message = null;
  for await (const made of readUIMessageStream({
    stream: forMessage,
    onError: error => errors.push(String(error?.message ?? error)),
  })) {
    message = made;
  }
  await types;
  return { chunks, message, errors };
}

class State {
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
  }
  pushMessage = message => { this.messages = this.messages.concat(message); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), this.snapshot(message),
      ...this.messages.slice(index + 1)];
  };
  snapshot = value => structuredClone(value);
}

class Chat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new State() });
  }
}

async function until(check, what) {
  for (let i = 0; i < 1200; i++) {
    if (check()) return;
    await new Promise(resolve => setTimeout(resolve, 50));
  }
  throw new Error(`gave up waiting for ${what}`);
}

async function chat(text, decision) {
  const errors = [];
  const made = new Chat({
    id: chatId,
    transport,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onError: error => errors.push(String(error?.message ?? error)),
  });
  await made.sendMessage({ text });
  const answered = new Set();
  for (;;) {
    await until(() => made.status === 'ready' || made.status === 'error', 'the chat to be ready');
    const last = made.messages.at(-1);
    const waiting = (last?.parts ?? []).filter(
      part => part.state === 'approval-requested' && !answered.has(part.approval.id));
    if (!waiting.length) break;
    for (const part of waiting) {
      answered.add(part.approval.id);
      await made.addToolApprovalResponse({ id: part.approval.id, approved: decision === 'approve' });
    }
    // the answer goes out by itself; wait for that request to begin
    await until(() => made.status !== 'ready' || requests.length > answered.size, 'the answer');
  }
  return { messages: made.messages, status: made.status, errors, requests };
}

let out;
if (mode === 'send') {
  const [text, dataUrl, mediaType] = rest;
  const stream = await transport.sendMessages({
    chatId, trigger: 'submit-message', messageId: undefined, abortSignal: undefined,
    messages: [userMessage(text, dataUrl, mediaType)],
  });
  out = await read(stream);
} else if (mode === 'resume') {
  const stream = await transport.reconnectToStream({ chatId });
  if (stream !== null) console.error('resumed');
  out = stream === null ? { resumed: false } : { resumed: true, ...(await read(stream)) };
} else if (mode === 'chat') {
  out = await chat(rest[0], rest[1]);
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
process.stdout.write(JSON.stringify(out) + '\n');
