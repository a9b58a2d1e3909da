// Starts `gantry lsp` for .gantry files. The server does the work (diagnostics, hover,
// go to definition, completion, formatting, outline); this file only launches it.
'use strict';

const vscode = require('vscode');
const { LanguageClient, TransportKind } = require('vscode-languageclient/node');

let client;

function activate(context) {
  const command = vscode.workspace.getConfiguration('gantry').get('path') || 'gantry';
  const serverOptions = {
    run: { command, args: ['lsp'], transport: TransportKind.stdio },
    debug: { command, args: ['lsp'], transport: TransportKind.stdio },
  };
  const clientOptions = {
    documentSelector: [{ language: 'gantry' }],
    synchronize: {
      // Policies are directories: a file added or removed next to an open one changes it.
      fileEvents: vscode.workspace.createFileSystemWatcher('**/*.gantry'),
    },
  };
  client = new LanguageClient('gantry', 'Gantry language server', serverOptions, clientOptions);
  client.start().catch((err) => {
    vscode.window.showErrorMessage(
      `Gantry: cannot start \`${command} lsp\` (${err.message}). Install gantry or set "gantry.path".`
    );
  });
  context.subscriptions.push({ dispose: () => client && client.stop() });
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
