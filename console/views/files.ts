/**
 * A file browser over the API's directory operations (docs/api.md, "Directories"): a listing,
 * upload of files into the directory shown, download of a file (or of a directory as a tar
 * archive), a new folder, and removal. Downloads are held in memory before the browser saves
 * them: a page cannot stream a response to disk without asking for a file handle first.
 */
import type { FileInfo } from 'vessel/client';
import { ErrorBox, announce, confirmed, field, fill, formatBytes, h, onSubmit, table, time, whileBusy } from '../dom.js';
import type { RuntimeContext, View } from '../view.js';

const START_DIRECTORY = '/root';

/** `dir` joined with `name`, for absolute POSIX paths. */
export const joinPath = (dir: string, name: string): string => (dir.endsWith('/') ? dir + name : `${dir}/${name}`);

/** The parent of an absolute path; / is its own. */
export function parentOf(path: string): string {
  const trimmed = path.replace(/\/+$/, '');
  const cut = trimmed.lastIndexOf('/');
  return cut <= 0 ? '/' : trimmed.slice(0, cut);
}

/** Hands bytes to the browser's download manager under `name`. */
function save(data: Blob, name: string): void {
  const url = URL.createObjectURL(data);
  const link = h('a', { href: url, download: name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  // The download has taken the bytes by the time the click's task ends; revoke after it.
  setTimeout(() => URL.revokeObjectURL(url), 0);
}

export function filesSection(context: RuntimeContext): View {
  const files = context.runtime.files;
  const errors = new ErrorBox();
  const abort = new AbortController();
  let directory = START_DIRECTORY;

  const pathInput = h('input', { name: 'path', value: directory, required: true, autocomplete: 'off', spellcheck: 'false' });
  const open = h('button', { type: 'submit' }, 'Open');
  const up = h('button', { type: 'button', class: 'secondary' }, 'Up');
  const upload = h('input', { type: 'file', multiple: true });
  const folder = h('input', { name: 'folder', required: true, autocomplete: 'off', spellcheck: 'false' });
  const makeFolder = h('button', { type: 'submit', class: 'secondary' }, 'Create folder');
  const listing = table('', ['Name', 'Type', 'Size', 'Modified', 'Actions']);

  const list = async (path: string): Promise<void> => {
    errors.clear();
    let entries: FileInfo[];
    try {
      entries = await files.list(path, { signal: abort.signal });
    } catch (error) {
      if (!abort.signal.aborted) errors.show(error, `Could not list ${path}`);
      return;
    }
    directory = path;
    pathInput.value = path;
    listing.caption.textContent = `Contents of ${path}`;
    // Folders first, then files, each by name, as file managers show them.
    entries.sort((a, b) => Number(b.type === 'directory') - Number(a.type === 'directory') || a.name.localeCompare(b.name));
    fill(listing.body, entries.length === 0 ? h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'This folder is empty.')) : entries.map(entryRow));
  };

  const entryRow = (entry: FileInfo): HTMLTableRowElement => {
    const isDirectory = entry.type === 'directory';
    const name = isDirectory
      ? h('button', { type: 'button', class: 'link', onclick: () => void list(entry.path) }, `${entry.name}/`)
      : h('span', {}, entry.name);
    const download = h('button', { type: 'button', class: 'secondary small', 'aria-label': `Download ${entry.name}${isDirectory ? ' as a tar archive' : ''}` }, 'Download');
    download.addEventListener('click', () =>
      void whileBusy(download, errors, `Could not download ${entry.name}`, async () => {
        if (isDirectory) {
          save(await new Response(await files.downloadArchive(entry.path, { signal: abort.signal })).blob(), `${entry.name}.tar`);
        } else {
          save(new Blob([(await files.readBytes(entry.path, { signal: abort.signal })) as Uint8Array<ArrayBuffer>]), entry.name);
        }
        announce(`Downloaded ${entry.name}.`);
      }),
    );
    const remove = h('button', { type: 'button', class: 'danger small', 'aria-label': `Delete ${entry.name}` }, 'Delete');
    remove.addEventListener('click', () => {
      if (!confirmed(isDirectory ? `Delete the folder ${entry.path} and everything in it?` : `Delete ${entry.path}?`)) return;
      void whileBusy(remove, errors, `Could not delete ${entry.name}`, async () => {
        await files.remove(entry.path, { recursive: isDirectory, signal: abort.signal });
        announce(`Deleted ${entry.name}.`);
        await list(directory);
      });
    });
    const canDownload = isDirectory || entry.type === 'file';
    return h(
      'tr',
      {},
      h('th', { scope: 'row' }, name),
      h('td', {}, entry.type),
      h('td', {}, entry.type === 'file' ? formatBytes(entry.size_bytes) : ''),
      h('td', {}, time(entry.modified_at)),
      h('td', { class: 'row-actions' }, canDownload ? download : null, remove),
    );
  };

  const navigate = h('form', { class: 'row' }, field('Folder', pathInput), h('div', { class: 'actions' }, open, up));
  navigate.addEventListener('submit', (event) => {
    event.preventDefault();
    void list(pathInput.value.trim() || '/');
  });
  up.addEventListener('click', () => void list(parentOf(directory)));

  upload.addEventListener('change', () => {
    const chosen = [...(upload.files ?? [])];
    if (chosen.length === 0) return;
    upload.disabled = true;
    errors.clear();
    void (async () => {
      try {
        for (const file of chosen) {
          await files.write(joinPath(directory, file.name), file, { signal: abort.signal });
          announce(`Uploaded ${file.name} (${formatBytes(file.size)}) to ${directory}.`);
        }
      } catch (error) {
        errors.show(error, 'Could not upload');
      } finally {
        upload.disabled = false;
        upload.value = '';
        await list(directory);
      }
    })();
  });

  const mkdir = h('form', { class: 'row' }, field('New folder', folder), h('div', { class: 'actions' }, makeFolder));
  onSubmit(mkdir, makeFolder, errors, 'Could not create the folder', async () => {
    const name = folder.value.trim();
    await files.mkdir(name.startsWith('/') ? name : joinPath(directory, name), { signal: abort.signal });
    folder.value = '';
    await list(directory);
  });

  void list(directory);
  const element = h(
    'section',
    { class: 'files' },
    h('h2', {}, 'Files'),
    navigate,
    h('div', { class: 'row' }, field('Upload files into this folder', upload), mkdir),
    errors.element,
    listing.element,
  );
  return { element, dispose: () => abort.abort() };
}
